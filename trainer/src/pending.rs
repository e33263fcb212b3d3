//! Trajectories waiting for the next update, per algorithm: PPO batches of
//! `ppo.rollout_steps_per_update` steps, GRPO groups of `grpo.group_size`
//! runs per prompt, DPO pairs (online buffer, offline JSONL, or both).

use std::collections::{BTreeMap, VecDeque};

use rulka_config::{Algorithm, Config, DpoDataMode, Grouping};
use rulka_learner::TrajBatch;
use tch::Device;

use crate::prepare::on_device;
use crate::update::{Ready, Work};
use crate::BadInput;

/// Trajectories waiting for the next update, per algorithm, with the frame
/// count each batch or group is scheduled at, and the updates sealed and
/// not yet trained.
#[derive(Debug)]
pub(crate) struct Pending {
    kind: Kind,
    ready: VecDeque<Ready>,
}

#[derive(Debug)]
enum Kind {
    /// PPO: whole rollouts until enough steps.
    Ppo { trajs: Vec<TrajBatch>, steps: usize, anchor: Option<u64> },
    /// GRPO: groups per prompt, each with its schedule anchor.
    Grpo { groups: BTreeMap<u64, (u64, Vec<TrajBatch>)> },
    /// DPO: the online buffer and the offline pairs.
    Dpo {
        buffer: VecDeque<(f64, TrajBatch)>,
        online: bool,
        offline: Vec<(TrajBatch, TrajBatch)>,
        cursor: usize,
    },
}

impl Pending {
    /// Empty pending data for `cfg`'s algorithm (DPO offline pairs loaded).
    pub fn new(cfg: &Config, device: Device) -> anyhow::Result<Self> {
        let kind = match cfg.training.algorithm {
            Algorithm::Ppo => Kind::Ppo { trajs: Vec::new(), steps: 0, anchor: None },
            Algorithm::Grpo => Kind::Grpo { groups: BTreeMap::new() },
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
                        let trajs = rulka_learner::load_jsonl(cfg, path)?;
                        let pairs = rulka_learner::offline_pairs(&trajs);
                        if pairs.is_empty() {
                            return Err(BadInput(format!(
                                "{}: {} trajectories give no pairs (a group needs two runs with different returns)",
                                path.display(),
                                trajs.len()
                            ))
                            .into());
                        }
                        tracing::info!(
                            "[rulka train] DPO: {} offline pairs from {} trajectories in {}",
                            pairs.len(),
                            trajs.len(),
                            path.display()
                        );
                        pairs
                            .iter()
                            .map(|&(c, r)| {
                                (
                                    on_device(
                                        rulka_learner::trajectory_batch(&trajs[c], cfg),
                                        device,
                                    ),
                                    on_device(
                                        rulka_learner::trajectory_batch(&trajs[r], cfg),
                                        device,
                                    ),
                                )
                            })
                            .collect()
                    }
                };
                Kind::Dpo {
                    buffer: VecDeque::new(),
                    online: cfg.dpo.data_mode != DpoDataMode::Offline,
                    offline,
                    cursor: 0,
                }
            }
        };
        Ok(Self { kind, ready: VecDeque::new() })
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
        match &mut self.kind {
            Kind::Ppo { anchor, .. } => *anchor.get_or_insert(frames_before),
            Kind::Grpo { groups } => {
                groups.entry(Self::group_key(cfg, group)).or_insert((frames_before, Vec::new())).0
            }
            Kind::Dpo { .. } => frames_before,
        }
    }

    /// The anchor [`Pending::anchor`] would give now, without starting a
    /// batch or group (for logging a trajectory before it is added).
    pub fn peek_anchor(&self, cfg: &Config, group: u64, frames_before: u64) -> u64 {
        match &self.kind {
            Kind::Ppo { anchor, .. } => anchor.unwrap_or(frames_before),
            Kind::Grpo { groups } => {
                groups.get(&Self::group_key(cfg, group)).map_or(frames_before, |g| g.0)
            }
            Kind::Dpo { .. } => frames_before,
        }
    }

    /// Adds a trajectory (its return orders DPO's best and worst), counted
    /// when the learner had seen `frames_after` frames. When it completes a
    /// batch, a group or (DPO) gives a pair, that update is sealed at once —
    /// each update sees the configured amount, not whatever queued meanwhile —
    /// and the next trajectory starts a new batch with its own anchor.
    pub fn add(&mut self, cfg: &Config, t: TrajBatch, ret: f64, frames_after: u64) {
        let steps = t.len();
        let (work, steps) = match &mut self.kind {
            Kind::Ppo { trajs, steps: pending_steps, anchor } => {
                *pending_steps += steps;
                trajs.push(t);
                if *pending_steps < cfg.ppo.rollout_steps_per_update as usize {
                    return;
                }
                let at = anchor.take().unwrap_or(frames_after);
                (Work::Ppo(std::mem::take(trajs), at), std::mem::take(pending_steps))
            }
            Kind::Grpo { groups } => {
                let key = Self::group_key(cfg, t.group);
                let g = groups.entry(key).or_insert((frames_after, Vec::new()));
                g.1.push(t);
                if g.1.len() < cfg.grpo.group_size as usize {
                    return;
                }
                let Some((at, group)) = groups.remove(&key) else { return };
                let steps = group.iter().map(TrajBatch::len).sum();
                (Work::Grpo(group, at), steps)
            }
            Kind::Dpo { buffer, online, offline, cursor } => {
                buffer.push_back((ret, t));
                while buffer.len() > cfg.dpo.pair_buffer_max.max(2) as usize {
                    buffer.pop_front();
                }
                let mut pairs = Vec::new();
                if *online {
                    pairs.extend(online_pair(buffer));
                }
                // Offline mode: one stored pair per received trajectory; `both`: online + offline.
                if !offline.is_empty() {
                    let (c, r) = &offline[*cursor % offline.len()];
                    pairs.push((c.shallow_clone(), r.shallow_clone()));
                    *cursor += 1;
                }
                if pairs.is_empty() {
                    return;
                }
                (Work::Dpo(pairs), steps)
            }
        };
        self.ready.push_back(Ready { work, frames: frames_after, steps });
    }

    /// The oldest sealed update, if any.
    pub fn take_ready(&mut self) -> Option<Ready> {
        self.ready.pop_front()
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
    (best.0 > worst.0).then(|| (best.1.shallow_clone(), worst.1.shallow_clone()))
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

    fn traj(group: u64, steps: usize) -> TrajBatch {
        let z = || tch::Tensor::zeros([steps as i64], (tch::Kind::Float, Device::Cpu));
        TrajBatch {
            image: z(),
            floats: z(),
            actions: z(),
            old_logp: z(),
            old_value: z(),
            rewards: vec![0.0; steps],
            group,
        }
    }

    /// A PPO batch is sealed by the trajectory that fills it — at that
    /// trajectory's frames, with the batch's anchor — and the next
    /// trajectory of the same poll starts a new batch at its own frames.
    #[test]
    fn a_full_batch_is_sealed_and_the_next_trajectory_starts_another() {
        let cfg = Config::from_yaml_str("ppo: {rollout_steps_per_update: 100}", "t").unwrap();
        let mut p = Pending::new(&cfg, Device::Cpu).unwrap();
        // Three trajectories of 60 steps arrive in one poll at 1000, 1060, 1120 frames.
        for (k, before) in [1000u64, 1060, 1120].into_iter().enumerate() {
            let at = p.anchor(&cfg, 0, before);
            assert_eq!(at, if k < 2 { 1000 } else { 1120 }, "trajectory {k}");
            p.add(&cfg, traj(0, 60), 0.0, before + 60);
        }
        let r = p.take_ready().expect("the first two fill a batch of 100 steps");
        assert_eq!((r.frames, r.steps), (1120, 120));
        assert!(matches!(r.work, Work::Ppo(ref b, 1000) if b.len() == 2));
        assert!(p.take_ready().is_none(), "60 steps pending are not a batch");
    }

    /// GRPO: a group is sealed when it has `group_size` runs; other prompts wait.
    #[test]
    fn a_complete_group_is_sealed_alone() {
        let cfg = Config::from_yaml_str("training: {algorithm: grpo}\ngrpo: {group_size: 2}", "t")
            .unwrap();
        let mut p = Pending::new(&cfg, Device::Cpu).unwrap();
        for (group, before) in [(7u64, 0u64), (8, 10), (7, 20)] {
            p.anchor(&cfg, group, before);
            p.add(&cfg, traj(group, 10), 0.0, before + 10);
        }
        let r = p.take_ready().expect("prompt 7 has two runs");
        assert_eq!((r.frames, r.steps), (30, 20));
        assert!(matches!(r.work, Work::Grpo(ref g, 0) if g.iter().all(|t| t.group == 7)));
        assert!(p.take_ready().is_none());
    }

    /// `grpo.grouping: any` (the original's): any `group_size` runs make a
    /// group, whatever their prompts, under one schedule anchor; the same
    /// arrivals grouped by track seal nothing.
    #[test]
    fn grouping_any_seals_runs_of_different_prompts_together() {
        let arrivals = [(7u64, 0u64), (8, 10), (9, 20)];
        let any = Config::from_yaml_str(
            "training: {algorithm: grpo}\ngrpo: {group_size: 3, grouping: any}",
            "t",
        )
        .unwrap();
        let mut p = Pending::new(&any, Device::Cpu).unwrap();
        let mut anchors = Vec::new();
        for (group, before) in arrivals {
            anchors.push(p.anchor(&any, group, before));
            p.add(&any, traj(group, 10), 0.0, before + 10);
        }
        assert_eq!(anchors, [0, 0, 0], "one group, one anchor");
        let r = p.take_ready().expect("three runs of any prompts are a group");
        assert_eq!((r.frames, r.steps), (30, 30));
        let Work::Grpo(g, 0) = r.work else { panic!("a GRPO group anchored at 0") };
        assert_eq!(g.iter().map(|t| t.group).collect::<Vec<_>>(), [7, 8, 9]);
        assert!(p.take_ready().is_none());

        let same = Config::from_yaml_str(
            "training: {algorithm: grpo}\ngrpo: {group_size: 3, grouping: same_track}",
            "t",
        )
        .unwrap();
        let mut p = Pending::new(&same, Device::Cpu).unwrap();
        for (group, before) in arrivals {
            assert_eq!(p.anchor(&same, group, before), before, "each track its own group");
            p.add(&same, traj(group, 10), 0.0, before + 10);
        }
        assert!(p.take_ready().is_none(), "no track has three runs");
    }
}
