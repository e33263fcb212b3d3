//! Saved trajectories ([`SavedTrajectory`], JSON Lines, defined in
//! `rulka_demos`) as learner tensors, and the offline DPO pairs built from
//! them: `dpo.data_mode: offline|both` reads `dpo.offline_pairs_jsonl`.
//!
//! Pairs: within each group (track), trajectories sorted by return; the best
//! is paired with the worst, the second best with the second worst, and so on,
//! while the chosen return is strictly higher.

use std::collections::BTreeMap;

use rulka_config::Config;
use rulka_demos::SavedTrajectory;
use rulka_network::Architecture;
use tch::{Device, Kind, Tensor};

use crate::algorithms::TrajBatch;

/// `t` as learner tensors.
pub fn trajectory_batch(t: &SavedTrajectory, cfg: &Config) -> TrajBatch {
    let arch = Architecture::from_config(cfg);
    let n = t.len() as i64;
    let image = match &arch.image {
        Some(i) => Tensor::from_slice(&t.frames).view([n, 1, i.height as i64, i.width as i64]),
        None => Tensor::zeros([n, 1, 1, 1], (Kind::Uint8, Device::Cpu)),
    };
    TrajBatch {
        image,
        floats: Tensor::from_slice(&t.floats).view([n, arch.float_dim as i64]),
        actions: Tensor::from_slice(&t.actions).view([n, arch.n_heads as i64]).to_kind(Kind::Int64),
        old_logp: Tensor::from_slice(&t.log_probs),
        old_value: Tensor::from_slice(&t.values),
        rewards: t.rewards.clone(),
        group: t.group,
    }
}

/// Offline pairs `(chosen, rejected)` as indices into `trajs` (module docs).
pub fn offline_pairs(trajs: &[SavedTrajectory]) -> Vec<(usize, usize)> {
    let mut groups: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, t) in trajs.iter().enumerate() {
        groups.entry(t.group).or_default().push(i);
    }
    let mut pairs = Vec::new();
    for idx in groups.values_mut() {
        idx.sort_by(|&a, &b| trajs[b].ret().total_cmp(&trajs[a].ret()).then(a.cmp(&b)));
        let (mut lo, mut hi) = (0, idx.len());
        while lo + 1 < hi {
            hi -= 1;
            let (best, worst) = (idx[lo], idx[hi]);
            if trajs[best].ret() <= trajs[worst].ret() {
                break;
            }
            pairs.push((best, worst));
            lo += 1;
        }
    }
    pairs
}
