//! Trajectories waiting for the next update, per algorithm: PPO batches of
//! `ppo.rollout_steps_per_update` steps, GRPO groups of `grpo.group_size`
//! runs per prompt, DPO pairs (online buffer, offline JSONL, or both).

use std::collections::{BTreeMap, VecDeque};

use rulka_config::{Algorithm, Config, DpoDataMode, Grouping};
use rulka_learner::algorithms::{Learner, TrajBatch, UpdateStats};
use tch::Device;

use crate::train::on_device;
use crate::BadInput;

fn share(t: &TrajBatch) -> TrajBatch {
    TrajBatch {
        image: t.image.shallow_clone(),
        floats: t.floats.shallow_clone(),
        actions: t.actions.shallow_clone(),
        old_logp: t.old_logp.shallow_clone(),
        old_value: t.old_value.shallow_clone(),
        rewards: t.rewards.clone(),
        group: t.group,
    }
}

/// Trajectories waiting for the next update, per algorithm, with the frame
/// count each batch or group is scheduled at.
#[derive(Debug)]
pub enum Pending {
    /// PPO: whole rollouts until enough steps.
    Ppo { trajs: Vec<TrajBatch>, steps: usize, anchor: Option<u64> },
    /// GRPO: groups per prompt, each with its schedule anchor.
    Grpo { groups: BTreeMap<u64, (u64, Vec<TrajBatch>)> },
    /// DPO: the online buffer and the offline pairs.
    Dpo {
        buffer: VecDeque<(f64, TrajBatch)>,
        fresh: bool,
        online: bool,
        offline: Vec<(TrajBatch, TrajBatch)>,
        cursor: usize,
    },
}

impl Pending {
    /// Empty pending data for `cfg`'s algorithm (DPO offline pairs loaded).
    pub fn new(cfg: &Config, device: Device) -> anyhow::Result<Self> {
        Ok(match cfg.training.algorithm {
            Algorithm::Ppo => Pending::Ppo { trajs: Vec::new(), steps: 0, anchor: None },
            Algorithm::Grpo => Pending::Grpo { groups: BTreeMap::new() },
            Algorithm::Dpo => {
                let offline = match (&cfg.dpo.data_mode, &cfg.dpo.offline_pairs_jsonl) {
                    (DpoDataMode::Online, _) | (_, None) => Vec::new(),
                    (_, Some(path)) => {
                        if !path.is_file() {
                            return Err(BadInput(format!(
                                "dpo.offline_pairs_jsonl: {}: no such file",
                                path.display()
                            ))
                            .into());
                        }
                        let trajs = rulka_learner::offline::load_jsonl(cfg, path)?;
                        let pairs = rulka_learner::offline::offline_pairs(&trajs);
                        if pairs.is_empty() {
                            return Err(BadInput(format!(
                                "{}: {} trajectories give no pairs (a group needs two runs with different returns)",
                                path.display(),
                                trajs.len()
                            ))
                            .into());
                        }
                        eprintln!(
                            "[rulka train] DPO: {} offline pairs from {} trajectories in {}",
                            pairs.len(),
                            trajs.len(),
                            path.display()
                        );
                        pairs
                            .iter()
                            .map(|&(c, r)| {
                                (
                                    on_device(trajs[c].to_batch(cfg), device),
                                    on_device(trajs[r].to_batch(cfg), device),
                                )
                            })
                            .collect()
                    }
                };
                Pending::Dpo {
                    buffer: VecDeque::new(),
                    fresh: false,
                    online: cfg.dpo.data_mode != DpoDataMode::Offline,
                    offline,
                    cursor: 0,
                }
            }
        })
    }

    fn group_key(cfg: &Config, group: u64) -> u64 {
        match cfg.grpo.grouping {
            Grouping::SameTrack => group,
            Grouping::Any => 0,
        }
    }

    /// The schedule clock for a trajectory of `group` that arrives when
    /// `frames_before` frames were seen before it: as the original, one
    /// anchor per PPO batch and per GRPO group — the frame count before its
    /// first trajectory — used for the trajectory's reward shaping and for
    /// the update's scheduled coefficients alike (so the folded potential
    /// telescopes with the γ GAE uses). DPO: the trajectory's own arrival.
    pub fn anchor(&mut self, cfg: &Config, group: u64, frames_before: u64) -> u64 {
        match self {
            Pending::Ppo { anchor, .. } => *anchor.get_or_insert(frames_before),
            Pending::Grpo { groups } => {
                groups.entry(Self::group_key(cfg, group)).or_insert((frames_before, Vec::new())).0
            }
            Pending::Dpo { .. } => frames_before,
        }
    }

    /// The anchor [`Pending::anchor`] would give now, without starting a
    /// batch or group (for logging a trajectory before it is added).
    pub fn peek_anchor(&self, cfg: &Config, group: u64, frames_before: u64) -> u64 {
        match self {
            Pending::Ppo { anchor, .. } => anchor.unwrap_or(frames_before),
            Pending::Grpo { groups } => {
                groups.get(&Self::group_key(cfg, group)).map_or(frames_before, |g| g.0)
            }
            Pending::Dpo { .. } => frames_before,
        }
    }

    /// Adds a trajectory (its return orders DPO's best and worst).
    pub fn add(&mut self, cfg: &Config, t: TrajBatch, ret: f64) {
        match self {
            Pending::Ppo { trajs, steps, .. } => {
                *steps += t.len();
                trajs.push(t);
            }
            Pending::Grpo { groups } => {
                groups.entry(Self::group_key(cfg, t.group)).or_insert((0, Vec::new())).1.push(t);
            }
            Pending::Dpo { buffer, fresh, .. } => {
                buffer.push_back((ret, t));
                while buffer.len() > cfg.dpo.pair_buffer_max.max(2) as usize {
                    buffer.pop_front();
                }
                *fresh = true;
            }
        }
    }

    /// Runs an update if enough data is pending.
    pub fn update(
        &mut self,
        cfg: &Config,
        learner: &mut Learner,
    ) -> anyhow::Result<Option<UpdateStats>> {
        match self {
            Pending::Ppo { trajs, steps, anchor } => {
                if *steps < cfg.ppo.rollout_steps_per_update as usize {
                    return Ok(None);
                }
                let batch = std::mem::take(trajs);
                *steps = 0;
                let at = anchor.take().unwrap_or(learner.frames);
                learner.ppo_update_at(&batch, at).map(Some)
            }
            Pending::Grpo { groups } => {
                let k = cfg.grpo.group_size as usize;
                let Some(key) = groups.iter().find(|(_, v)| v.1.len() >= k).map(|(k, _)| *k) else {
                    return Ok(None);
                };
                let Some((at, group)) = groups.remove(&key) else { return Ok(None) };
                learner.grpo_update_at(&group, at).map(Some)
            }
            Pending::Dpo { buffer, fresh, online, offline, cursor } => {
                if !*fresh {
                    return Ok(None);
                }
                *fresh = false;
                let mut pairs = Vec::new();
                if *online {
                    if let Some(p) = online_pair(buffer) {
                        pairs.push(p);
                    }
                }
                // Offline mode: one stored pair per received trajectory; `both`: online + offline.
                if !offline.is_empty() {
                    let (c, r) = &offline[*cursor % offline.len()];
                    pairs.push((share(c), share(r)));
                    *cursor += 1;
                }
                if pairs.is_empty() {
                    return Ok(None);
                }
                learner.dpo_update(&pairs)
            }
        }
    }
}

/// Best and worst return among the newest trajectory's group, if they differ.
fn online_pair(buffer: &VecDeque<(f64, TrajBatch)>) -> Option<(TrajBatch, TrajBatch)> {
    let (_, newest) = buffer.back()?;
    let g = newest.group;
    let mut same = buffer.iter().filter(|(_, t)| t.group == g);
    let first = same.next()?;
    let (mut best, mut worst) = (first, first);
    for x in same {
        if x.0 > best.0 {
            best = x;
        }
        if x.0 < worst.0 {
            worst = x;
        }
    }
    (best.0 > worst.0).then(|| (share(&best.1), share(&worst.1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One schedule clock per PPO batch and per GRPO group: the frame count
    /// before its first trajectory, kept until the update consumes it.
    #[test]
    fn batches_and_groups_are_anchored_at_their_first_trajectory() {
        let ppo = Config::default();
        let mut p = Pending::new(&ppo, Device::Cpu).unwrap();
        assert_eq!(p.anchor(&ppo, 3, 1000), 1000);
        assert_eq!(p.anchor(&ppo, 4, 1500), 1000, "same batch");
        let grpo = Config::from_yaml_str("training: {algorithm: grpo}", "t").unwrap();
        let mut g = Pending::new(&grpo, Device::Cpu).unwrap();
        assert_eq!(g.anchor(&grpo, 7, 100), 100);
        assert_eq!(g.anchor(&grpo, 8, 200), 200, "another track is another group");
        assert_eq!(g.anchor(&grpo, 7, 300), 100, "the group keeps its anchor");
    }
}
