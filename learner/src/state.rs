//! Saving and resuming the whole learner state: network, optimiser moments
//! and counters, reference policy, frame/update counters and the shuffling
//! RNG — so a resumed run continues exactly as the original would have.
//!
//! Layout: `state/LATEST` names one complete state directory. Each save
//! writes a staging directory `.state.<updates>[.<n>].partial/` (every file
//! fsynced), renames it to a name no directory has — `state.<updates>`, or
//! `state.<updates>.<n>` with `n` one past the highest when a state of that
//! update count exists (a checkpoint without an update in between: an idle
//! run, a broker outage) — then atomically replaces `LATEST` with that name,
//! and only then removes the states older than the one `LATEST` named
//! before (kept as a fallback) and any staging left by a killed save. The
//! state `LATEST` names is never modified or removed, so a crash at any
//! point leaves `LATEST` naming a complete state: the new one once the
//! rename of `LATEST` is durable, the previous one before.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use rulka_checkpoint::{write_atomic, Meta, Tensor as WTensor, Weights};
use rulka_config::Config;
use serde::{Deserialize, Serialize};
use tch::Device;

use crate::algorithms::Learner;
use crate::ActorCritic;

const STATE_FORMAT: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct Counters {
    format: u32,
    frames: u64,
    updates: u64,
    rng: u64,
    optimizer_step: i64,
    optimizer_skipped: u64,
    has_reference: bool,
    network_hash: String,
    /// Dynamic loss scale (absent in states saved before mixed precision).
    #[serde(default)]
    loss_scale: Option<f64>,
    /// `ppo.normalize_returns`' statistic (absent in states saved before it).
    #[serde(default)]
    return_moments: crate::ReturnMoments,
    /// `ppo.popart_beta`'s moments (absent in states saved before it).
    #[serde(default)]
    value_moments: crate::ValueMoments,
}

/// The name of a state of `updates` that no entry of `dir` has:
/// `state.<updates>`, or `state.<updates>.<n>` with `n` one past the highest
/// such suffix there.
fn fresh_state_name(dir: &Path, updates: u64) -> anyhow::Result<String> {
    let base = format!("state.{updates}");
    let mut taken: Option<u64> = None;
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let n = e?.file_name().to_string_lossy().into_owned();
        if n == base {
            taken = Some(taken.unwrap_or(0));
        } else if let Some(k) = n.strip_prefix(&base).and_then(|r| r.strip_prefix('.')) {
            if let Ok(k) = k.parse::<u64>() {
                taken = Some(taken.map_or(k, |t| t.max(k)));
            }
        }
    }
    Ok(match taken {
        None => base,
        Some(k) => format!("{base}.{}", k + 1),
    })
}

impl Learner {
    /// Saves the complete learner state under `dir` (see the module docs:
    /// the state `LATEST` names is never touched). Returns the state
    /// directory written.
    pub fn save_state(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let previous =
            std::fs::read_to_string(dir.join("LATEST")).ok().map(|s| s.trim().to_string());
        let name = fresh_state_name(dir, self.updates)?;
        let staging = dir.join(format!(".{name}.partial"));
        if staging.exists() {
            std::fs::remove_dir_all(&staging)
                .with_context(|| format!("removing an unfinished {}", staging.display()))?;
        }
        std::fs::create_dir(&staging).with_context(|| format!("creating {}", staging.display()))?;
        self.write_state_files(&staging)?;
        std::fs::File::open(&staging)?.sync_all()?;
        let sdir = dir.join(&name);
        std::fs::rename(&staging, &sdir)
            .with_context(|| format!("renaming {} to {}", staging.display(), sdir.display()))?;
        std::fs::File::open(dir)?.sync_all()?;
        write_atomic(&dir.join("LATEST"), name.as_bytes())?;
        // Only now: the new state is LATEST; keep the previous as a fallback.
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                let stale_state =
                    n.starts_with("state.") && n != name && previous.as_deref() != Some(n.as_str());
                let stale_staging =
                    n.strip_prefix(".state.").is_some_and(|r| r.ends_with(".partial"));
                if (stale_state || stale_staging) && e.path().is_dir() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(sdir)
    }

    /// Writes the state's files into `sdir` (a staging directory).
    fn write_state_files(&self, sdir: &Path) -> anyhow::Result<()> {
        let cfg = self.config();
        if !self.network().to_weights().all_finite() {
            bail!("network weights are not finite; refusing to save the learner state");
        }
        self.network().save(&sdir.join("weights.safetensors"), cfg, self.frames)?;
        if let Some(r) = self.reference() {
            r.save(&sdir.join("reference.safetensors"), cfg, self.frames)?;
        }
        let (m, v, step, skipped) = self.optimizer().state();
        let names = self.network().parameter_names();
        let mut opt = Weights::default();
        for (i, name) in names.iter().enumerate() {
            let len = m.get(i).map_or(0, Vec::len);
            opt.tensors.insert(
                format!("m.{i:03}.{name}"),
                WTensor { shape: vec![len], data: m.get(i).cloned().unwrap_or_default() },
            );
            opt.tensors.insert(
                format!("v.{i:03}.{name}"),
                WTensor { shape: vec![len], data: v.get(i).cloned().unwrap_or_default() },
            );
        }
        opt.write(&sdir.join("optimizer.safetensors"), &Meta::new(cfg, self.frames))?;
        let counters = Counters {
            format: STATE_FORMAT,
            frames: self.frames,
            updates: self.updates,
            rng: self.rng_state(),
            optimizer_step: step,
            optimizer_skipped: skipped,
            has_reference: self.reference().is_some(),
            network_hash: cfg.network_hash(),
            loss_scale: Some(self.optimizer().loss_scale()),
            return_moments: self.return_moments(),
            value_moments: self.value_moments(),
        };
        write_atomic(
            &sdir.join("learner.json"),
            serde_json::to_string_pretty(&counters)?.as_bytes(),
        )?;
        Ok(())
    }

    /// Resumes the learner saved under `dir` for `cfg`. A missing, partial or
    /// corrupt state, or one for another network, is an error naming the file.
    pub fn resume(cfg: &Config, dir: &Path, device: Device) -> anyhow::Result<Self> {
        let latest = dir.join("LATEST");
        let name = std::fs::read_to_string(&latest)
            .with_context(|| format!("no saved learner state: cannot read {}", latest.display()))?;
        let sdir = dir.join(name.trim());
        let cpath = sdir.join("learner.json");
        let counters: Counters = serde_json::from_slice(
            &std::fs::read(&cpath).with_context(|| format!("reading {}", cpath.display()))?,
        )
        .with_context(|| format!("{}: not a learner state", cpath.display()))?;
        if counters.format != STATE_FORMAT {
            bail!(
                "{}: learner state format {} is not supported (this build reads {STATE_FORMAT})",
                cpath.display(),
                counters.format
            );
        }
        if counters.network_hash != cfg.network_hash() {
            bail!(
                "{}: saved for network {}, the config describes {}",
                cpath.display(),
                counters.network_hash,
                cfg.network_hash()
            );
        }
        let mut net = ActorCritic::new_unseeded(cfg, device);
        let wpath = sdir.join("weights.safetensors");
        net.load_weights(&Weights::read(&wpath)?, cfg, false)
            .with_context(|| format!("loading {}", wpath.display()))?;
        let mut learner = Learner::with_network(cfg, net);
        if counters.has_reference {
            let rpath = sdir.join("reference.safetensors");
            let mut r = ActorCritic::new_unseeded(cfg, device);
            r.load_weights(&Weights::read(&rpath)?, cfg, false)
                .with_context(|| format!("loading {}", rpath.display()))?;
            r.set_training(false);
            learner.set_reference(r);
        }
        let opath = sdir.join("optimizer.safetensors");
        let opt = Weights::read(&opath)?;
        // `m.<i>.<parameter>`: matched by the parameter's name, so a state
        // saved when the network listed its tensors in another order resumes.
        let mut by_name = std::collections::HashMap::new();
        for (k, t) in &opt.tensors {
            let mut parts = k.splitn(3, '.');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(which @ ("m" | "v")), Some(_), Some(name)) => {
                    by_name.insert((which, name), &t.data);
                }
                _ => bail!("{}: unexpected tensor {k}", opath.display()),
            }
        }
        let names = learner.network().parameter_names();
        let (mut m, mut v) = (Vec::with_capacity(names.len()), Vec::with_capacity(names.len()));
        for name in &names {
            for (which, out) in [("m", &mut m), ("v", &mut v)] {
                let data = by_name.get(&(which, name.as_str())).ok_or_else(|| {
                    anyhow::anyhow!("{}: no {which} moment for {name}", opath.display())
                })?;
                out.push((*data).clone());
            }
        }
        learner
            .optimizer_mut()
            .set_state(&m, &v, counters.optimizer_step, counters.optimizer_skipped)
            .with_context(|| format!("restoring {}", opath.display()))?;
        if let Some(scale) = counters.loss_scale {
            learner.optimizer_mut().set_loss_scale(scale);
        }
        learner.frames = counters.frames;
        learner.updates = counters.updates;
        learner.set_rng_state(counters.rng);
        learner.set_return_moments(counters.return_moments);
        learner.set_value_moments(counters.value_moments);
        Ok(learner)
    }
}
