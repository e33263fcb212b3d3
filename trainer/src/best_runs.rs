//! The best run on each map, kept as a TMInterface input script:
//! `RUN_DIR/best_runs/<map>_<seconds>.inputs` (`# ` comments, then timed
//! `press`/`rel`; [`rulka_env::inputs`]), written whenever a finished run
//! (exploration or greedy) beats the map's best so far. `rulka inputs play`
//! plays one into the game or `rulka sim serve`; TMInterface loads one with
//! `load`. A resumed run starts from the bests already on disk.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rulka_config::Config;
use rulka_env::{input_script, InputTiming};

/// The bests so far and where they go.
#[derive(Debug)]
pub struct BestRuns {
    dir: PathBuf,
    timing: InputTiming,
    best: HashMap<String, f64>,
}

impl BestRuns {
    /// Bests of `run_dir` (those already written count).
    pub fn open(cfg: &Config, run_dir: &Path) -> Self {
        let dir = crate::RunDir::new(run_dir).best_runs();
        let best = Self::times(run_dir).into_iter().collect();
        Self { dir, timing: InputTiming::from_config(cfg), best }
    }

    /// The best race time (s) per map (as its [`rulka_run::map_key`]) kept
    /// in `run_dir`'s `best_runs/`.
    pub fn times(run_dir: &Path) -> BTreeMap<String, f64> {
        let dir = crate::RunDir::new(run_dir).best_runs();
        let mut best = BTreeMap::new();
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((map, t)) = rulka_run::parse_best_run_file(&name) {
                let b = best.entry(map).or_insert(t);
                *b = f64::min(*b, t);
            }
        }
        best
    }

    /// Offers a finished run on `map` of `race_time_s` driven with `actions`;
    /// writes it (atomically) when its time, to the hundredth the file name
    /// keeps, beats the map's best, and returns its path. A time that is
    /// none (not finite, not above zero) is never kept.
    pub fn offer(
        &mut self,
        map: &str,
        race_time_s: f64,
        actions: &[i32],
        what: &str,
    ) -> anyhow::Result<Option<PathBuf>> {
        let Some(t) = rulka_run::kept_race_time(race_time_s) else {
            tracing::warn!("[rulka train] a finished run on {map} with race time {race_time_s}: not a time, not kept as a best run");
            return Ok(None);
        };
        let key = rulka_run::map_key(map);
        if self.best.get(&key).is_some_and(|&b| b <= t) {
            return Ok(None);
        }
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let path = self.dir.join(rulka_run::best_run_file(map, t));
        let comments = [
            format!("# rulka: best run on {map}, race time {t:.2} s ({what})"),
            "# TMInterface: `load` this file; or `rulka inputs play FILE --port P`".to_string(),
        ];
        let refs: Vec<&str> = comments.iter().map(String::as_str).collect();
        let text = input_script(actions, &self.timing, &refs);
        rulka_checkpoint::write_atomic(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        self.best.insert(key, t);
        Ok(Some(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config as Runner, RngSeed};

    #[derive(Debug, Clone)]
    enum Op {
        Offer(usize, f64),
        /// The run resumed: the bests read back from the files.
        Reopen,
    }

    /// Maps with spaces, an underscore, a dot, a non-ASCII letter, and two
    /// whose file names are one.
    const MAPS: [&str; 5] = ["A06 Race", "A06_Race", "map5", "Été 2", "x_1.5"];

    fn time() -> impl Strategy<Value = f64> {
        prop_oneof![
            (100u32..110).prop_map(|c| f64::from(c) / 10.0), // ties
            (10_000u32..10_020).prop_map(|m| f64::from(m) / 1000.0), // within a hundredth
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(0.0),
            Just(-3.0),
            Just(0.004), // rounds to nothing
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..MAPS.len(), time()).prop_map(|(m, t)| Op::Offer(m, t)),
            1 => Just(Op::Reopen),
        ]
    }

    /// The model's file-name form of a map.
    fn key(map: &str) -> String {
        map.chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
            .collect()
    }

    proptest! {
        #![proptest_config(Runner { cases: 300, rng_seed: RngSeed::Fixed(0x6265_7374), failure_persistence: None, ..Runner::default() })]

        #[test]
        fn a_run_is_kept_when_its_time_to_the_hundredth_beats_its_maps_before_and_after_a_resume(
            ops in prop::collection::vec(op(), 1..25),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let cfg = Config::default();
            let mut runs = BestRuns::open(&cfg, dir.path());
            let mut best: BTreeMap<String, f64> = BTreeMap::new();
            let mut files = 0;
            for o in &ops {
                match *o {
                    Op::Reopen => runs = BestRuns::open(&cfg, dir.path()),
                    Op::Offer(m, t) => {
                        let hundredths = (t * 100.0).round();
                        let time = (t.is_finite() && hundredths >= 1.0).then_some(hundredths / 100.0);
                        let beats = time.is_some_and(|t| best.get(&key(MAPS[m])).is_none_or(|&b| t < b));
                        let kept = runs.offer(MAPS[m], t, &[1, 1, 0], "test").unwrap();
                        prop_assert_eq!(kept.is_some(), beats, "{:?} after {:?}", o, best);
                        if let (Some(path), Some(t)) = (kept, time) {
                            best.insert(key(MAPS[m]), t);
                            files += 1;
                            let name = path.file_name().unwrap().to_string_lossy().into_owned();
                            prop_assert_eq!(name, format!("{}_{t:.2}.inputs", key(MAPS[m])));
                        }
                    }
                }
                prop_assert_eq!(&BestRuns::times(dir.path()), &best);
            }
            let on_disk = std::fs::read_dir(dir.path().join("best_runs")).map_or(0, |d| d.count());
            prop_assert_eq!(on_disk, files, "one file per improvement, no temporary left");
        }
    }
}
