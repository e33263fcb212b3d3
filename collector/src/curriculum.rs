//! Which training track ("prompt") each rollout drives: the plain cycle
//! ([`cycle_index`]), or with `collectors.curriculum.replay` > 0 a
//! prioritised level replay (PLR) kept by the collector — see
//! [`rulka_config::CurriculumConfig`] for the rule.

use rulka_config::{Algorithm, Config, CurriculumConfig, Grouping};

/// `grpo.group_size` when a GRPO run groups by track (that many
/// consecutive exploration runs drive one track), else `None`.
fn track_groups(cfg: &Config) -> Option<u64> {
    let by_track =
        cfg.training.algorithm == Algorithm::Grpo && cfg.grpo.grouping == Grouping::SameTrack;
    by_track.then(|| u64::from(cfg.grpo.group_size.max(1)))
}

/// Which of `n` prompts a collector's next rollout drives on the plain
/// cycle, given its id, the rollouts it has started and the exploration
/// (non-greedy) ones among them. Collectors cycle the prompts one rollout
/// each, starting at their id; a GRPO run grouped by track (`groups`, from
/// [`track_groups`]) instead drives `grpo.group_size` consecutive
/// exploration rollouts of one prompt (greedy runs do not count), so each
/// group is filled from runs of the current policy rather than from runs
/// one whole cycle of the prompts apart (with 256 tracks, ~1800 runs).
fn cycle_index(n: usize, id: u32, groups: Option<u64>, rollouts: u64, explo: u64) -> usize {
    let step = groups.map_or(rollouts, |k| explo / k);
    ((u64::from(id) + step) % n.max(1) as u64) as usize
}

/// A collector's choice of tracks across its rollouts.
///
/// Without a curriculum every rollout takes [`cycle_index`]. With one,
/// greedy runs still do; an exploration run replays a scored track with
/// probability `replay` (which one by rank and staleness, as
/// [`CurriculumConfig`] says), otherwise drives the curriculum's own
/// cycle's next track (starting at the collector's id). Under GRPO grouped by track the choice is made once per
/// group of `grpo.group_size` exploration runs, which all drive it.
#[derive(Debug, Clone)]
pub struct TrackChooser {
    n: usize,
    id: u32,
    /// [`track_groups`] of the run's config.
    groups: Option<u64>,
    curriculum: Option<Curriculum>,
    group: Option<usize>,
}

#[derive(Debug, Clone)]
struct Curriculum {
    k: CurriculumConfig,
    /// Each track's last exploration run's mean surprise (`None`: not driven).
    scores: Vec<Option<f64>>,
    /// The scored runs counted when each track was last scored.
    scored_at: Vec<u64>,
    scored_runs: u64,
    cycle: u64,
    rng: u64,
}

impl TrackChooser {
    /// The chooser of collector `id` over `n_prompts` prompts; `seed` seeds
    /// the replay draws (distinct per collector and restart).
    pub fn new(cfg: &Config, n_prompts: usize, id: u32, seed: u64) -> Self {
        let k = cfg.collectors.curriculum;
        let n = n_prompts.max(1);
        let curriculum = (k.replay > 0.0).then(|| Curriculum {
            k,
            scores: vec![None; n],
            scored_at: vec![0; n],
            scored_runs: 0,
            cycle: u64::from(id),
            rng: seed ^ 0x5EED_C0FF_EE00_7AC5,
        });
        Self { n, id, groups: track_groups(cfg), curriculum, group: None }
    }

    /// The prompt the next rollout drives, and whether it is a replay;
    /// `rollouts` and `explo_rollouts` count those started before it.
    pub fn choose(&mut self, rollouts: u64, explo_rollouts: u64, greedy: bool) -> (usize, bool) {
        let plain = cycle_index(self.n, self.id, self.groups, rollouts, explo_rollouts);
        let Some(c) = self.curriculum.as_mut().filter(|_| !greedy) else {
            return (plain, false);
        };
        if let Some(k) = self.groups {
            if let Some(g) = self.group.filter(|_| explo_rollouts % k != 0) {
                return (g, false);
            }
            let (i, replay) = c.next(self.n);
            self.group = Some(i);
            return (i, replay);
        }
        c.next(self.n)
    }

    /// Scores prompt `index` by the mean surprise (`-log π(a|s)`) of an
    /// exploration run that drove it to its end.
    pub fn record(&mut self, index: usize, surprise: f64) {
        if let Some(c) = self.curriculum.as_mut() {
            if index < c.scores.len() && surprise.is_finite() {
                c.scores[index] = Some(surprise);
                c.scored_runs += 1;
                c.scored_at[index] = c.scored_runs;
            }
        }
    }

    /// The probability of each prompt when a run replays (0 for those not
    /// scored yet); empty without a curriculum or before the first score.
    #[cfg(test)]
    pub fn replay_probabilities(&self) -> Vec<f64> {
        self.curriculum.as_ref().map(Curriculum::probabilities).unwrap_or_default()
    }

    /// With a curriculum, how far it got: prompts scored of all.
    pub fn progress(&self) -> Option<(usize, usize)> {
        self.curriculum.as_ref().map(|c| (c.scores.iter().flatten().count(), self.n))
    }
}

impl Curriculum {
    fn next(&mut self, n: usize) -> (usize, bool) {
        if self.scores.iter().any(Option::is_some) && self.uniform() < self.k.replay {
            let p = self.probabilities();
            let u = self.uniform();
            let mut acc = 0.0;
            let mut last = 0;
            for (i, &pi) in p.iter().enumerate() {
                if pi > 0.0 {
                    acc += pi;
                    last = i;
                    if u < acc {
                        return (i, true);
                    }
                }
            }
            return (last, true);
        }
        let i = (self.cycle % n as u64) as usize;
        self.cycle += 1;
        (i, false)
    }

    fn probabilities(&self) -> Vec<f64> {
        let n = self.scores.len();
        let mut scored: Vec<(usize, f64)> =
            self.scores.iter().enumerate().filter_map(|(i, s)| s.map(|s| (i, s))).collect();
        if scored.is_empty() {
            return Vec::new();
        }
        // Rank 1 is the highest score; ties keep the lower index first.
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut rank = vec![0.0; n];
        for (r, &(i, _)) in scored.iter().enumerate() {
            rank[i] = (-(r as f64 + 1.0).ln() / self.k.temperature).exp();
        }
        let mut stale = vec![0.0; n];
        for &(i, _) in &scored {
            stale[i] = (self.scored_runs - self.scored_at[i]) as f64;
        }
        let (rs, ss) = (rank.iter().sum::<f64>(), stale.iter().sum::<f64>());
        // Staleness is all zero when one track is scored: rank alone then.
        let w = if ss > 0.0 { self.k.staleness } else { 0.0 };
        (0..n)
            .map(|i| (1.0 - w) * rank[i] / rs + if ss > 0.0 { w * stale[i] / ss } else { 0.0 })
            .collect()
    }

    /// A uniform draw in [0, 1): SplitMix64's top 53 bits.
    fn uniform(&mut self) -> f64 {
        (splitmix64(&mut self.rng) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// SplitMix64 (Steele, Lea and Flood): the next output of `state`.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Config {
        Config::from_yaml_str(yaml, "test").expect("config")
    }

    fn seeds_driven(yaml: &str, id: u32, eval_every: u64, n: u64) -> Vec<u64> {
        let cfg = config(yaml);
        let seeds = crate::prompts(&cfg);
        let mut chooser = TrackChooser::new(&cfg, seeds.len(), id, 1);
        let mut explo = 0;
        (0..n)
            .map(|rollout| {
                let greedy = (rollout + 1) % eval_every == 0;
                let s = seeds[chooser.choose(rollout, explo, greedy).0];
                explo += u64::from(!greedy);
                s
            })
            .collect()
    }

    #[test]
    fn ppo_cycles_the_tracks_one_rollout_each() {
        let y = "training: {algorithm: ppo}\nenvironment: {sim: {track_seeds: [10, 11, 12]}}";
        assert_eq!(seeds_driven(y, 0, 5, 7), [10, 11, 12, 10, 11, 12, 10]);
        assert_eq!(seeds_driven(y, 1, 5, 4), [11, 12, 10, 11]);
    }

    #[test]
    fn grpo_by_track_drives_a_whole_group_on_one_track() {
        let y = "training: {algorithm: grpo}\ngrpo: {group_size: 3, grouping: same_track}\n\
                 environment: {sim: {track_seeds: [10, 11, 12]}}";
        // Every 4th rollout (3, 7, 11) is greedy: not counted in a group.
        assert_eq!(seeds_driven(y, 0, 4, 12), [10, 10, 10, 11, 11, 11, 11, 12, 12, 12, 12, 10]);
        assert_eq!(seeds_driven(y, 2, 100, 6), [12, 12, 12, 10, 10, 10]);
        let any = "training: {algorithm: grpo}\ngrpo: {group_size: 3, grouping: any}\n\
                   environment: {sim: {track_seeds: [10, 11, 12]}}";
        assert_eq!(seeds_driven(any, 0, 100, 4), [10, 11, 12, 10]);
    }

    const PLR: &str = "collectors: {curriculum: {replay: 0.7, temperature: 0.5, staleness: 0.2}}\n\
                       environment: {sim: {track_seeds: [10, 11, 12, 13]}}";

    /// Three tracks scored 1.0 (track 0), 3.0 (track 1), 2.0 (track 3), in
    /// that order: ranks 3, 1, 2 and staleness 2, 1, 0 runs. By hand, with
    /// temperature 0.5 (weights rank^-2: 1/9, 1, 1/4, sum 49/36) and
    /// staleness 0.2: track 0 = 0.8·(4/49) + 0.2·(2/3) = 0.198639…,
    /// track 1 = 0.8·(36/49) + 0.2·(1/3) = 0.654421…, track 2 = 0,
    /// track 3 = 0.8·(9/49) + 0 = 0.146939….
    #[test]
    fn replay_probabilities_mix_rank_and_staleness_as_worked_by_hand() {
        let cfg = config(&format!("training: {{algorithm: ppo}}\n{PLR}"));
        let mut c = TrackChooser::new(&cfg, 4, 0, 7);
        assert!(c.replay_probabilities().is_empty(), "nothing scored yet");
        c.record(0, 1.0);
        // One scored track: staleness is all zero, rank alone.
        assert_eq!(c.replay_probabilities(), [1.0, 0.0, 0.0, 0.0]);
        c.record(1, 3.0);
        c.record(3, 2.0);
        let p = c.replay_probabilities();
        let want = [
            0.8 * 4.0 / 49.0 + 0.2 * 2.0 / 3.0,
            0.8 * 36.0 / 49.0 + 0.2 / 3.0,
            0.0,
            0.8 * 9.0 / 49.0,
        ];
        // Sums of four terms of size <= 1 in f64: error ~1e-16.
        for (got, want) in p.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{p:?} against {want:?}");
        }
        assert_eq!(c.progress(), Some((3, 4)));
    }

    /// With 70 % of the runs replays, the draws follow the replay
    /// probabilities; the others walk the cycle from the collector's id.
    #[test]
    fn draws_follow_the_probabilities_and_the_rest_walks_the_cycle() {
        let cfg = config(&format!("training: {{algorithm: ppo}}\n{PLR}"));
        let mut c = TrackChooser::new(&cfg, 4, 2, 11);
        c.record(0, 1.0);
        c.record(1, 3.0);
        c.record(3, 2.0);
        let p = c.replay_probabilities();
        let n = 20_000;
        let (mut counts, mut cycle, mut replays) = ([0u32; 4], Vec::new(), 0);
        for r in 0..n {
            match c.choose(r, r, false) {
                (i, true) => {
                    counts[i] += 1;
                    replays += 1;
                }
                (i, false) => cycle.push(i),
            }
        }
        // Binomial(20 000, 0.7): sd 65, the bound is 6 sd (0.3 would give 6 000).
        assert!((replays as f64 - 14_000.0).abs() < 390.0, "{replays} replays of {n}");
        for i in 0..4 {
            // Binomial(replays, p): sd <= 0.5 sqrt(14 400) = 60; 6 sd.
            let want = p[i] * f64::from(replays);
            assert!(
                (f64::from(counts[i]) - want).abs() < 360.0,
                "track {i}: {counts:?} against {p:?}"
            );
        }
        assert_eq!(counts[2], 0, "an unscored track was replayed");
        assert_eq!(cycle[..6], [2, 3, 0, 1, 2, 3], "the cycle starts at the collector's id");
    }

    /// The generator's first outputs from state 0, as published with the
    /// reference implementation.
    #[test]
    fn splitmix64_gives_its_reference_outputs() {
        let mut state = 0;
        let got: Vec<u64> = (0..3).map(|_| splitmix64(&mut state)).collect();
        assert_eq!(got, [0xE220_A839_7B1D_CDAF, 0x6E78_9E6A_A1B9_65F4, 0x06C4_5D18_8009_454F]);
    }

    /// A score that is not finite, or for a prompt past the last, changes
    /// nothing (and does not panic).
    #[test]
    fn non_finite_scores_and_unknown_prompts_are_ignored() {
        let cfg = config(&format!("training: {{algorithm: ppo}}\n{PLR}"));
        let mut c = TrackChooser::new(&cfg, 4, 0, 7);
        c.record(0, 1.0);
        c.record(1, 3.0);
        let before = c.replay_probabilities();
        c.record(2, f64::NAN);
        c.record(3, f64::INFINITY);
        c.record(4, 9.0);
        assert_eq!(c.replay_probabilities(), before);
        assert_eq!(c.progress(), Some((2, 4)));
    }

    #[test]
    fn greedy_runs_keep_the_plain_cycle_and_replay_zero_is_the_plain_cycle() {
        let on = format!("training: {{algorithm: ppo}}\n{PLR}");
        let cfg = config(&on);
        let mut c = TrackChooser::new(&cfg, 4, 1, 3);
        c.record(2, 5.0);
        for r in 0..40 {
            assert_eq!(c.choose(r, r, true), (cycle_index(4, 1, track_groups(&cfg), r, r), false));
        }
        let off = config(&on.replace("replay: 0.7", "replay: 0.0"));
        let mut c = TrackChooser::new(&off, 4, 1, 3);
        c.record(2, 5.0);
        assert!(c.replay_probabilities().is_empty());
        assert_eq!(c.progress(), None);
        for r in 0..40 {
            assert_eq!(c.choose(r, r, false), (cycle_index(4, 1, track_groups(&off), r, r), false));
        }
    }

    /// GRPO grouped by track: the curriculum's choice holds for the whole
    /// group of exploration runs (greedy runs between them take the cycle
    /// and do not break the group); grouped `any`, each run chooses.
    #[test]
    fn grpo_by_track_replays_whole_groups() {
        let y = format!(
            "training: {{algorithm: grpo}}\ngrpo: {{group_size: 3, grouping: same_track}}\n{PLR}"
        )
        .replace("replay: 0.7", "replay: 0.9");
        let cfg = config(&y);
        let mut c = TrackChooser::new(&cfg, 4, 0, 5);
        c.record(3, 9.0);
        let (mut explo, mut groups, mut replays) = (0, Vec::new(), 0);
        for r in 0..350 {
            let greedy = r % 7 == 6;
            let (i, replay) = c.choose(r, explo, greedy);
            if !greedy {
                if explo % 3 == 0 {
                    groups.push(Vec::new());
                }
                groups.last_mut().unwrap().push(i);
                explo += 1;
                replays += u32::from(replay);
            }
        }
        for g in &groups {
            assert!(g.iter().all(|&i| i == g[0]), "a group split across tracks: {groups:?}");
        }
        let on_3 = groups.iter().filter(|g| g[0] == 3).count();
        assert!(
            on_3 * 2 > groups.len(),
            "the scored track drove {on_3} of {} groups",
            groups.len()
        );
        // One replay is counted per group, not per run.
        assert!(replays as usize <= groups.len(), "{replays} replays in {} groups", groups.len());
        // Each group draws afresh: of 100 groups, about 10 drive the cycle
        // (P(none) = 0.9^100 < 3e-5), which walks the tracks from 0.
        let tracks: std::collections::BTreeSet<usize> = groups.iter().map(|g| g[0]).collect();
        assert!(tracks.len() >= 3, "the groups drove only {tracks:?}");
        let any = config(&y.replace("same_track", "any"));
        let mut c = TrackChooser::new(&any, 4, 0, 5);
        c.record(3, 9.0);
        let replays = (0..30).filter(|&r| c.choose(r, r, false).1).count();
        // Binomial(30, 0.9) replays, mean 27, P(<= 15) < 1e-6; groups of 3 would give <= 10.
        assert!(replays > 15, "{replays} replays in 30 runs grouped any");
    }
}
