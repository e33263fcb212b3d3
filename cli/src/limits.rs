//! The simulator's limit table: the planner's best time on each track
//! (`rulka sim plan` writes it, `rulka eval --limits` reads it), one CSV
//! row per track:
//!
//! `track,decision_ms,seed,limit_ms,autopilot_ms,decisions,engine_steps,cpu_s,converged,last_doubling_gain,rungs,drive`
//!
//! `track` is the preset (`hard`) or, for a real map's shape, `line:` and
//! its file's name; `decision_ms` the decision period the drives were
//! planned at (a table holds one of each). `autopilot_ms` is empty when the
//! autopilot does not finish; `last_doubling_gain` (the share of the time
//! the ladder's last doubling of the beam took off) empty after one rung;
//! `rungs` the ladder as `beam:ms` separated by spaces; `drive` the input
//! script's file name, beside the table in `drives/`.

use std::collections::BTreeMap;
use std::path::Path;

use rulka_config::Config;

use crate::BadInput;

/// The header every limit table starts with.
pub const HEADER: &str = "track,decision_ms,seed,limit_ms,autopilot_ms,decisions,engine_steps,cpu_s,converged,last_doubling_gain,rungs,drive";

/// One track's limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// Track seed.
    pub seed: u64,
    /// The planner's best race time, ms.
    pub limit_ms: u64,
    /// The autopilot's race time, ms (`None`: it does not finish).
    pub autopilot_ms: Option<u64>,
    /// Decisions of the best drive.
    pub decisions: usize,
    /// Engine steps the search simulated.
    pub engine_steps: u64,
    /// CPU seconds of the search (one thread).
    pub cpu_s: f64,
    /// Whether the ladder's last doubling gained less than asked.
    pub converged: bool,
    /// Share of the time the last doubling took off.
    pub last_doubling_gain: Option<f64>,
    /// The ladder, `beam:ms` by rung.
    pub rungs: String,
    /// The drive's input script (a file name in `drives/`).
    pub drive: String,
}

/// A limit table: what it was planned on, and its rows by seed.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitTable {
    /// `hard`, `medium`, `easy`, or `line:<file name>`.
    pub track: String,
    /// Milliseconds per decision.
    pub decision_ms: u64,
    /// The rows, by seed.
    pub rows: BTreeMap<u64, Limit>,
}

/// The `track` a config's drives are planned on.
pub fn track_of(cfg: &Config) -> String {
    match &cfg.environment.sim.track_from {
        Some(p) => format!(
            "line:{}",
            p.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ),
        None => format!("{:?}", cfg.environment.sim.track).to_lowercase(),
    }
}

/// Milliseconds per decision of a config's simulator.
pub fn decision_ms_of(cfg: &Config) -> u64 {
    let p = rulka_env::SimParams::from_config(cfg);
    u64::from(p.engine_ms) * u64::from(p.engine_steps)
}

impl LimitTable {
    /// An empty table for `cfg`'s tracks.
    pub fn for_config(cfg: &Config) -> Self {
        Self { track: track_of(cfg), decision_ms: decision_ms_of(cfg), rows: BTreeMap::new() }
    }

    /// The table as CSV text, rows by seed.
    pub fn to_csv(&self) -> String {
        let mut out = format!("{HEADER}\n");
        let opt = |x: Option<u64>| x.map_or_else(String::new, |v| v.to_string());
        for r in self.rows.values() {
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{:.3},{},{},{},{}\n",
                self.track,
                self.decision_ms,
                r.seed,
                r.limit_ms,
                opt(r.autopilot_ms),
                r.decisions,
                r.engine_steps,
                r.cpu_s,
                r.converged,
                r.last_doubling_gain.map_or_else(String::new, |g| format!("{g:.6}")),
                r.rungs,
                r.drive
            ));
        }
        out
    }

    /// Reads a table written by [`LimitTable::to_csv`]; an error names the
    /// line and the value that cannot be read.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, h)) if h.trim_end() == HEADER => {}
            Some((_, h)) => return Err(format!("line 1: `{h}` is not the header `{HEADER}`")),
            None => return Err("empty: not even the header".into()),
        }
        let mut table: Option<LimitTable> = None;
        for (i, line) in lines {
            let n = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split(',').collect();
            if f.len() != 12 {
                return Err(format!("line {n}: {} fields, not 12: `{line}`", f.len()));
            }
            let num = |k: usize, name: &str| {
                f[k].parse::<u64>()
                    .map_err(|_| format!("line {n}: {name} `{}` is not a whole number", f[k]))
            };
            let (seed, decision_ms, limit_ms) =
                (num(2, "seed")?, num(1, "decision_ms")?, num(3, "limit_ms")?);
            if limit_ms == 0 {
                return Err(format!("line {n}: limit_ms 0: no drive finishes in no time"));
            }
            let autopilot_ms = if f[4].is_empty() { None } else { Some(num(4, "autopilot_ms")?) };
            let decisions = num(5, "decisions")? as usize;
            let engine_steps = num(6, "engine_steps")?;
            let cpu_s: f64 =
                f[7].parse().ok().filter(|x: &f64| x.is_finite() && *x >= 0.0).ok_or_else(
                    || format!("line {n}: cpu_s `{}` is not a number of seconds", f[7]),
                )?;
            let converged = match f[8] {
                "true" => true,
                "false" => false,
                v => return Err(format!("line {n}: converged `{v}` is neither true nor false")),
            };
            let last_doubling_gain = if f[9].is_empty() {
                None
            } else {
                Some(f[9].parse::<f64>().ok().filter(|x| (0.0..=1.0).contains(x)).ok_or_else(
                    || {
                        format!(
                            "line {n}: last_doubling_gain `{}` is not a share from 0 to 1",
                            f[9]
                        )
                    },
                )?)
            };
            let t = table.get_or_insert_with(|| LimitTable {
                track: f[0].to_string(),
                decision_ms,
                rows: BTreeMap::new(),
            });
            if t.track != f[0] || t.decision_ms != decision_ms {
                return Err(format!(
                    "line {n}: track {} at {decision_ms} ms a decision, where the table's first row has {} at {} ms",
                    f[0], t.track, t.decision_ms
                ));
            }
            let row = Limit {
                seed,
                limit_ms,
                autopilot_ms,
                decisions,
                engine_steps,
                cpu_s,
                converged,
                last_doubling_gain,
                rungs: f[10].to_string(),
                drive: f[11].to_string(),
            };
            if t.rows.insert(seed, row).is_some() {
                return Err(format!("line {n}: seed {seed} a second time"));
            }
        }
        table.ok_or_else(|| "no rows: the header alone".into())
    }

    /// Reads the table at `path` (errors name the file).
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
        Ok(Self::parse(&text).map_err(|e| BadInput(format!("{}: {e}", path.display())))?)
    }

    /// Whether the table was planned on `cfg`'s tracks at its decision
    /// period: the one check of `rulka eval --limits` and of a `rulka sim
    /// plan` into a folder that holds a table.
    pub fn planned_on(&self, cfg: &Config) -> Result<(), String> {
        let (track, ms) = (track_of(cfg), decision_ms_of(cfg));
        if self.track != track || self.decision_ms != ms {
            return Err(format!(
                "planned on {} at {} ms a decision, not the config's {track} at {ms} ms",
                self.track, self.decision_ms
            ));
        }
        Ok(())
    }

    /// Checks that the table was planned on `cfg`'s tracks ([`Self::planned_on`])
    /// and holds every seed of `seeds`; the limit of each, ms.
    pub fn limits_for(&self, cfg: &Config, seeds: &[u64]) -> Result<BTreeMap<u64, u64>, String> {
        self.planned_on(cfg)?;
        seeds
            .iter()
            .map(|&s| match self.rows.get(&s) {
                Some(r) => Ok((s, r.limit_ms)),
                None => Err(format!(
                    "no limit for track {s} (the table holds {})",
                    rulka_config::describe_seeds(&self.rows.keys().copied().collect::<Vec<_>>())
                )),
            })
            .collect()
    }
}

/// Per episode that finished on a track of `limits`: its time ÷ the limit
/// (1: as fast as the planner's best; above 1: slower).
pub fn limit_ratios(eps: &[rulka_inference::Episode], limits: &BTreeMap<u64, u64>) -> Vec<f64> {
    eps.iter()
        .filter_map(|e| Some(e.race_time_s? * 1000.0 / *limits.get(&e.seed)? as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seed: u64, limit_ms: u64) -> Limit {
        Limit {
            seed,
            limit_ms,
            autopilot_ms: Some(52_000),
            decisions: limit_ms as usize / 50 + 1,
            engine_steps: 12_345,
            cpu_s: 1.5,
            converged: true,
            last_doubling_gain: Some(0.0012),
            rungs: "256:41000 512:40500".into(),
            drive: format!("sim{seed}_{}.inputs", limit_ms as f64 / 1000.0),
        }
    }

    #[test]
    fn a_table_reads_back_as_written_and_bad_values_are_named() {
        let mut t = LimitTable { track: "hard".into(), decision_ms: 50, rows: BTreeMap::new() };
        t.rows.insert(1001, row(1001, 40_820));
        t.rows.insert(
            1000,
            Limit { autopilot_ms: None, last_doubling_gain: None, ..row(1000, 40_130) },
        );
        let text = t.to_csv();
        assert_eq!(LimitTable::parse(&text).unwrap(), t);
        // Rows come out by seed whatever order they went in.
        assert!(text.find(",1000,").unwrap() < text.find(",1001,").unwrap());
        let bad =
            |from: &str, to: &str| LimitTable::parse(&text.replacen(from, to, 1)).unwrap_err();
        assert!(bad(",40130,", ",0,").contains("limit_ms 0"), "{}", bad(",40130,", ",0,"));
        assert!(bad(",40820,", ",4o820,").contains("limit_ms `4o820`"));
        assert!(bad("hard,50,1001", "medium,50,1001").contains("line 3: track medium"));
        assert!(bad("hard,50,1001", "hard,40,1001").contains("at 40 ms"));
        assert!(bad(",1001,", ",1000,").contains("line 3: seed 1000 a second time"));
        assert!(bad(",true,", ",yes,").contains("converged `yes`"));
        assert!(LimitTable::parse("seed,limit\n").unwrap_err().contains("not the header"));
        // Every column's bad value names that column (the first row's field
        // made a word).
        let first = text.lines().nth(1).unwrap();
        for (k, name) in HEADER.split(',').enumerate() {
            let mut f: Vec<&str> = first.split(',').collect();
            if matches!(name, "track" | "rungs" | "drive") {
                continue; // any text
            }
            // Every numeric column is a count, a time or a share: none is
            // negative or non-finite (a NaN gain is a damaged table).
            for v in ["x", "NaN", "nan", "inf", "-inf", "-1", "1e400"] {
                if name == "converged" && v != "x" {
                    continue;
                }
                f[k] = v;
                let bad_text = text.replacen(first, &f.join(","), 1);
                let e = LimitTable::parse(&bad_text)
                    .expect_err(&format!("{name} `{v}` was read as a value"));
                assert!(
                    e.contains(&format!("{name} `{v}`")) && e.contains("line 2"),
                    "{name}: {e}"
                );
            }
        }
        // A share's edges are values: no gain and the whole time.
        for g in ["0.000000", "1.000000"] {
            let t2 = text.replacen(",0.001200,", &format!(",{g},"), 1);
            assert_ne!(t2, text);
            assert!(LimitTable::parse(&t2).is_ok(), "gain {g}");
        }
        assert!(LimitTable::parse(&format!("{HEADER}\n")).unwrap_err().contains("no rows"));
    }

    #[test]
    fn limits_are_given_only_for_the_configs_tracks_and_every_seed() {
        let cfg = Config::from_yaml_str("environment: {sim: {track: hard}}", "t").unwrap();
        let mut t = LimitTable::for_config(&cfg);
        assert_eq!((t.track.as_str(), t.decision_ms), ("hard", 50));
        t.rows.insert(1000, row(1000, 40_000));
        t.rows.insert(1002, row(1002, 42_000));
        let got = t.limits_for(&cfg, &[1000, 1002]).unwrap();
        assert_eq!(got, BTreeMap::from([(1000, 40_000), (1002, 42_000)]));
        let e = t.limits_for(&cfg, &[1000, 1001, 1002]).unwrap_err();
        assert!(e.contains("no limit for track 1001"), "{e}");
        let medium = Config::from_yaml_str("environment: {sim: {track: medium}}", "t").unwrap();
        assert!(t.limits_for(&medium, &[1000]).unwrap_err().contains("not the config's medium"));
        // Another decision period, the same tracks: 4 engine steps of 10 ms.
        let faster = Config::from_yaml_str(
            "environment: {tm_engine_step_per_action: 4, sim: {track: hard}}",
            "t",
        )
        .unwrap();
        assert_eq!(decision_ms_of(&faster), 40);
        let e = t.limits_for(&faster, &[1000]).unwrap_err();
        assert!(
            e.contains("planned on hard at 50 ms a decision, not the config's hard at 40 ms"),
            "{e}"
        );
    }

    #[test]
    fn a_ratio_is_each_finished_episodes_time_over_its_tracks_limit() {
        let ep = |seed, t: Option<f64>| rulka_inference::Episode {
            seed,
            episode: 0,
            finished: t.is_some(),
            progress: 1.0,
            race_time_s: t,
            steps: 1,
        };
        let limits = BTreeMap::from([(1, 40_000), (2, 50_000)]);
        let eps = [ep(1, Some(44.0)), ep(2, Some(50.0)), ep(2, None), ep(3, Some(10.0))];
        // 44/40 and 50/50; the unfinished episode and the track without a limit count for none.
        assert_eq!(limit_ratios(&eps, &limits), vec![1.1, 1.0]);
    }
}
