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

/// A map name as a file name: letters, digits, `.`, `-` and `_` kept, the rest `_`.
fn file_name(map: &str) -> String {
    map.chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-') { c } else { '_' })
        .collect()
}

impl BestRuns {
    /// Bests of `run_dir` (those already written count).
    pub fn open(cfg: &Config, run_dir: &Path) -> Self {
        let dir = crate::RunDir::new(run_dir).best_runs();
        let best = Self::times(run_dir).into_iter().collect();
        Self { dir, timing: InputTiming::from_config(cfg), best }
    }

    /// The best race time (s) per map (as a file name) kept in `run_dir`'s
    /// `best_runs/`.
    pub fn times(run_dir: &Path) -> BTreeMap<String, f64> {
        let dir = crate::RunDir::new(run_dir).best_runs();
        let mut best = BTreeMap::new();
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".inputs") else { continue };
            let Some((map, time)) = stem.rsplit_once('_') else { continue };
            if let Ok(t) = time.parse::<f64>() {
                let b = best.entry(map.to_string()).or_insert(t);
                *b = f64::min(*b, t);
            }
        }
        best
    }

    /// Offers a finished run on `map` of `race_time_s` driven with `actions`;
    /// writes it when it beats the map's best and returns its path.
    pub fn offer(
        &mut self,
        map: &str,
        race_time_s: f64,
        actions: &[i32],
        what: &str,
    ) -> anyhow::Result<Option<PathBuf>> {
        let key = file_name(map);
        if self.best.get(&key).is_some_and(|&b| b <= race_time_s) {
            return Ok(None);
        }
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let path = self.dir.join(format!("{key}_{race_time_s:.2}.inputs"));
        let comments = [
            format!("# rulka: best run on {map}, race time {race_time_s:.2} s ({what})"),
            "# TMInterface: `load` this file; or `rulka inputs play FILE --port P`".to_string(),
        ];
        let refs: Vec<&str> = comments.iter().map(String::as_str).collect();
        let text = input_script(actions, &self.timing, &refs);
        let tmp = path.with_extension("inputs.tmp");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        self.best.insert(key, race_time_s);
        Ok(Some(path))
    }
}
