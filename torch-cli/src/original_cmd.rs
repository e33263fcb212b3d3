//! `rulka import` (the original's save folder → a rulka run) and
//! `rulka export --torch` (a rulka run → a save folder the original loads).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rulka_checkpoint::write_atomic;
use rulka_config::{Config, OptimizerKind};
use rulka_learner::{Learner, INITIAL_LOSS_SCALE};
use rulka_network::Architecture;
use rulka_original::{OptimizerState, ScalerState, Stats};
use rulka_trainer::{load_config, BadInput, BestRuns, Imported, RunDir};
use tch::Device;

/// Options of `rulka import`.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The original's save folder (`save/<run_name>/`, holding weights1.torch and,
    /// when present, optimizer1.torch, scaler.torch, accumulated_stats.joblib).
    pub save_dir: PathBuf,
    /// Config of the network (default: the folder's config_snapshot.yaml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The run directory to create (it must not exist, or be empty).
    #[arg(long)]
    pub run_dir: PathBuf,
}

/// The notes on β and ε that differ between the file and the config (the
/// config's are used from now on).
fn hyper_notes(cfg: &Config, o: &OptimizerState) -> Vec<String> {
    let t = &cfg.training;
    let mut notes = Vec::new();
    for (what, file, config) in [
        ("beta1", o.betas.0, t.adam_beta1),
        ("beta2", o.betas.1, t.adam_beta2),
        ("eps", o.eps, t.adam_epsilon),
    ] {
        if (file - config).abs() > 1e-12 * config.abs().max(1.0) {
            notes.push(format!(
                "optimizer1.torch has {what} {file}, the config {config}; training goes on with the config's"
            ));
        }
    }
    if o.weight_decay != 0.0 {
        notes.push(format!(
            "optimizer1.torch has weight_decay {}; rulka's RAdam applies none",
            o.weight_decay
        ));
    }
    if t.optimizer != OptimizerKind::Radam {
        notes.push(format!(
            "the config trains with {:?}; the RAdam moments are carried over as its moments",
            t.optimizer
        ));
    }
    notes
}

/// `rulka import`: reads the save folder (nothing written when any file is
/// refused), then writes the run directory beside its final name and
/// renames it into place.
pub fn import(args: &ImportArgs) -> anyhow::Result<()> {
    let dir = &args.save_dir;
    if !dir.is_dir() {
        return Err(BadInput(format!("{}: no such save folder", dir.display())).into());
    }
    let config_path = match &args.config {
        Some(c) => c.clone(),
        None => {
            let snap = dir.join(rulka_original::CONFIG);
            if !snap.is_file() {
                return Err(BadInput(format!(
                    "{}: no {} in the save folder; pass --config with the run's config",
                    dir.display(),
                    rulka_original::CONFIG
                ))
                .into());
            }
            snap
        }
    };
    let mut cfg = load_config(&config_path)?;
    let run_dir = &args.run_dir;
    if run_dir.exists()
        && std::fs::read_dir(run_dir).map(|mut d| d.next().is_some()).unwrap_or(true)
    {
        return Err(BadInput(format!(
            "{}: already exists and is not empty; choose another --run-dir",
            run_dir.display()
        ))
        .into());
    }
    let net = Architecture::from_config(&cfg).net;
    let wpath = dir.join(rulka_original::WEIGHTS);
    let weights = rulka_original::read_weights(&wpath, &net)?;
    let mut files = vec![rulka_original::WEIGHTS.to_owned()];
    let n_values: usize = weights.weights.tensors.values().map(|t| t.data.len()).sum();
    println!(
        "read {}: {} tensors, {} values",
        wpath.display(),
        weights.weights.tensors.len(),
        n_values
    );
    let mut notes = weights.notes.clone();
    let opath = dir.join(rulka_original::OPTIMIZER);
    let optimizer = if opath.is_file() {
        let o = rulka_original::read_optimizer(&opath, &net)?;
        println!(
            "read {}: RAdam at step {}, lr {}, betas ({}, {}), eps {}",
            opath.display(),
            o.step,
            o.lr,
            o.betas.0,
            o.betas.1,
            o.eps
        );
        notes.extend(hyper_notes(&cfg, &o));
        files.push(rulka_original::OPTIMIZER.to_owned());
        Some(o)
    } else {
        notes.push(format!("no {}: the optimizer starts fresh", rulka_original::OPTIMIZER));
        None
    };
    let spath = dir.join(rulka_original::SCALER);
    let scaler = if spath.is_file() {
        let s = rulka_original::read_scaler(&spath)?;
        match s {
            Some(s) => println!("read {}: loss scale {}", spath.display(), s.scale),
            None => println!("read {}: a disabled scaler (no loss scale)", spath.display()),
        }
        files.push(rulka_original::SCALER.to_owned());
        s
    } else {
        None
    };
    let tpath = dir.join(rulka_original::STATS);
    let stats = if tpath.is_file() {
        let s = rulka_original::read_stats(&tpath)?;
        let best = s
            .best_ms
            .iter()
            .map(|(m, ms)| format!("{m} {:.3} s", ms / 1000.0))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "read {}: {} frames, {:.2} h of training{}",
            tpath.display(),
            s.frames.unwrap_or(0),
            s.training_hours.unwrap_or(0.0),
            if best.is_empty() { String::new() } else { format!(", best {best}") }
        );
        files.push(rulka_original::STATS.to_owned());
        s
    } else {
        notes.push(format!(
            "no {}: the frame count (and so the schedules) starts at 0",
            rulka_original::STATS
        ));
        Stats::default()
    };
    for n in &notes {
        println!("  note: {n}");
    }
    let frames = stats.frames.unwrap_or(0);
    let learner = Learner::from_original(
        &cfg,
        &weights.weights,
        optimizer.as_ref(),
        scaler,
        frames,
        Device::Cpu,
    )
    .map_err(|e| BadInput(format!("{}: {e:#}", wpath.display())))?;

    // An import killed midway left its staging folder: staging() removes
    // those whose process is gone.
    let staging = RunDir::new(run_dir.clone()).staging("importing")?;
    let imported = Imported {
        source: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone()),
        files,
        notes,
        frames,
        optimizer_step: optimizer.as_ref().map(|o| o.step),
        loss_scale: scaler.map(|s| s.scale),
        loss_scale_growth_tracker: scaler.map(|s| s.growth_tracker),
        training_hours: stats.training_hours,
        best_ms: stats.best_ms,
        rolling_mean_ms: stats.rolling_mean_ms,
    };
    let written = (|| -> anyhow::Result<()> {
        std::fs::create_dir_all(&staging)
            .with_context(|| format!("creating {}", staging.display()))?;
        let run = RunDir::new(&staging);
        cfg.training.run_dir = run_dir.clone();
        write_atomic(&run.config_yaml(), cfg.to_yaml().as_bytes())?;
        learner.save_state(&run.state())?;
        learner.network().save(&run.weights(), &cfg, frames)?;
        run.write_imported(&imported)?;
        if run_dir.exists() {
            std::fs::remove_dir(run_dir)
                .with_context(|| format!("replacing the empty {}", run_dir.display()))?;
        }
        std::fs::rename(&staging, run_dir)
            .with_context(|| format!("moving {} to {}", staging.display(), run_dir.display()))?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    let run = RunDir::new(run_dir);
    println!(
        "wrote {}: config.yaml, state/ (frames {frames}, optimizer step {}), weights.safetensors, imported.json",
        run_dir.display(),
        optimizer.as_ref().map_or(0, |o| o.step)
    );
    println!("continue training:  rulka train --resume {}", run_dir.display());
    println!(
        "collectors' model:  rulka export --config {} --checkpoint {} -o model.onnx",
        run.config_yaml().display(),
        run.weights().display()
    );
    Ok(())
}

/// `rulka export --torch RUN_DIR -o SAVE_DIR`: the run's latest learner
/// state as the original's save folder. Every file is built before the
/// first is written, and each is written atomically.
pub fn export_torch(run_dir: &Path, out: &Path) -> anyhow::Result<()> {
    let run = RunDir::new(run_dir);
    if !run.config_yaml().is_file() {
        return Err(
            BadInput(format!("{}: not a rulka run (no config.yaml)", run_dir.display())).into()
        );
    }
    if !run.has_state() {
        return Err(BadInput(format!(
            "{}: no learner state ({} is missing); train the run first",
            run_dir.display(),
            run.state().join("LATEST").display()
        ))
        .into());
    }
    if out.join(rulka_original::WEIGHTS).exists() {
        return Err(BadInput(format!(
            "{}: already holds {}; choose an empty folder",
            out.display(),
            rulka_original::WEIGHTS
        ))
        .into());
    }
    let cfg = load_config(&run.config_yaml())?;
    let learner = Learner::resume(&cfg, &run.state(), Device::Cpu)
        .with_context(|| format!("reading {}", run.state().display()))?;
    let (weights, optimizer, scaler) = learner.to_original();
    let imported = run.imported()?.unwrap_or_default();
    // A run that never scaled its loss hands back the scaler it was imported
    // with, else GradScaler's initial state.
    let scaler = scaler.unwrap_or(ScalerState {
        scale: imported.loss_scale.unwrap_or(INITIAL_LOSS_SCALE),
        growth_tracker: imported.loss_scale_growth_tracker.unwrap_or(0),
    });
    let best_ms = merged_best_ms(imported.best_ms, BestRuns::times(run_dir));
    let stats = Stats {
        frames: Some(learner.frames),
        training_hours: imported.training_hours,
        best_ms,
        rolling_mean_ms: imported.rolling_mean_ms,
    };
    let net = Architecture::from_config(&cfg).net;
    let mut files = vec![(rulka_original::WEIGHTS, rulka_original::weights_file(&net, &weights)?)];
    files.push((rulka_original::OPTIMIZER, rulka_original::optimizer_file(&net, &optimizer)?));
    files.push((rulka_original::SCALER, rulka_original::scaler_file(&scaler)?));
    files.push((rulka_original::STATS, rulka_original::stats_file(&stats)));
    // The whole save folder or none: written beside its name and renamed
    // into place (an export killed midway leaves its staging folder, which
    // the next export's staging() removes once its process is gone).
    let staging = RunDir::new(out).staging("exporting")?;
    let kill_after = test_kill_after()?;
    let written = (|| -> anyhow::Result<()> {
        std::fs::create_dir_all(&staging)
            .with_context(|| format!("creating {}", staging.display()))?;
        for (i, (name, bytes)) in files.iter().enumerate() {
            write_atomic(&staging.join(name), bytes)?;
            if kill_after == Some(i + 1) {
                println!("[rulka export] RULKA_TEST_KILL_AT: SIGKILL now");
                rulka_shm::send_signal(std::process::id(), rulka_shm::SIGKILL);
            }
        }
        if out.exists() {
            // Checked empty of a save above; an empty folder is replaced.
            std::fs::remove_dir(out)
                .map_err(|e| BadInput(format!("replacing {}: {e}", out.display())))?;
        }
        std::fs::rename(&staging, out)
            .with_context(|| format!("moving {} to {}", staging.display(), out.display()))?;
        if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::File::open(parent)?.sync_all()?;
        }
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    for (name, bytes) in &files {
        println!("wrote {} ({} bytes)", out.join(name).display(), bytes.len());
    }
    let radam = format!("; RAdam at step {}, lr {}", optimizer.step, optimizer.lr);
    println!("{} tensors{radam}; {} frames", weights.tensors.len(), learner.frames);
    if cfg.training.optimizer != OptimizerKind::Radam {
        println!(
            "  note: the run trained with {:?}; its moments are written as RAdam's",
            cfg.training.optimizer
        );
    }
    println!(
        "  note: the original reads its own config, not this folder's; copy the network settings of {} into it",
        run.config_yaml().display()
    );
    Ok(())
}

/// The export's test hook `RULKA_TEST_KILL_AT=exported:N`: SIGKILL after
/// the N-th file of the save folder is written — the moment an interrupted
/// export must leave no save folder behind. Unset in any real run.
fn test_kill_after() -> anyhow::Result<Option<usize>> {
    let Ok(v) = std::env::var("RULKA_TEST_KILL_AT") else { return Ok(None) };
    match v.strip_prefix("exported:").and_then(|n| n.parse::<usize>().ok()).filter(|&n| n > 0) {
        Some(n) => Ok(Some(n)),
        None => {
            Err(BadInput(format!("RULKA_TEST_KILL_AT={v}: expected exported:N (N ≥ 1)")).into())
        }
    }
}

/// The best time per map handed back to the original (ms): the imported
/// one, or the run's own kept best run (`best_runs/`, seconds, keyed by
/// the map's file-name form `rulka_run::map_key`) when it is faster. A
/// run's best of an imported map goes under that map's own name.
fn merged_best_ms(
    imported: std::collections::BTreeMap<String, f64>,
    run_s: std::collections::BTreeMap<String, f64>,
) -> std::collections::BTreeMap<String, f64> {
    let mut best_ms = imported;
    for (key, s) in run_s {
        let ms = s * 1000.0;
        let map = best_ms.keys().find(|m| rulka_run::map_key(m) == key).cloned().unwrap_or(key);
        let b = best_ms.entry(map).or_insert(ms);
        *b = b.min(ms);
    }
    best_ms
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    /// Against the rule by hand: each map once, under the imported name
    /// where the run's key is that name's file-name form; the faster time
    /// on either side (a tie is the same number); the run's other maps as
    /// they are keyed.
    #[test]
    fn the_bests_handed_back_are_the_faster_of_imported_and_kept_under_the_imported_names() {
        let imported: BTreeMap<String, f64> = [
            ("A06 Race #2", 45_510.0), // the run is faster: 45.00 s
            ("map5", 30_000.0),        // the imported is faster
            ("hock", 50_000.0),        // a tie
            ("only imported", 70_000.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let run: BTreeMap<String, f64> =
            [("A06_Race__2", 45.0), ("map5", 31.25), ("hock", 50.0), ("sim3", 12.5)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
        let want: BTreeMap<String, f64> = [
            ("A06 Race #2", 45_000.0),
            ("map5", 30_000.0),
            ("hock", 50_000.0),
            ("only imported", 70_000.0),
            ("sim3", 12_500.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(super::merged_best_ms(imported, run), want);
    }
}
