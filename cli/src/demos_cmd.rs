//! `rulka demos record`: input files and saved trajectories driven through
//! the simulator or the game (TMInterface) with rulka's own observation
//! code, written as demonstration shards for `rulka pretrain`. Every drive
//! is recorded before the first shard is written: a refused input leaves
//! the output folder as it was.

use std::path::{Path, PathBuf};

use rulka_config::{parse_seeds, prompt_name, Config, EnvKind};
use rulka_demos::{
    config_maps, drive_autopilot, drive_script, replay_saved, write_demos, Demo, DemoError,
    SavedTrajectory,
};
use rulka_env::{Environment, SimEnv, TmiEnv};

use crate::{load_config, BadInput};

/// Where the drives are driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EnvChoice {
    /// The built-in simulator, on the config's track (or `track_from` map line).
    Sim,
    /// The game (or `rulka sim serve`) over TMInterface, on the config's maps.
    Tmi,
}

/// Arguments of `rulka demos record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Config whose observation code, network and maps the demonstrations are for.
    #[arg(long)]
    pub config: PathBuf,
    /// Folder of shards (created; a drive recorded again replaces its shard).
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// Environment that drives them (default: the config's `environment.kind`).
    #[arg(long, value_enum)]
    pub env: Option<EnvChoice>,
    /// TMInterface port (with `--env tmi`).
    #[arg(long)]
    pub port: Option<u16>,
    /// TMInterface host.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Track seed (simulator) or map index (game) every input file is
    /// driven on (default: the map a `best_runs` file name names, or the
    /// config's only map).
    #[arg(long)]
    pub track: Option<u64>,
    /// Saved trajectories (`rulka train --save-trajectories`): each line's
    /// actions driven again on its track and checked against what it saw.
    #[arg(long)]
    pub trajectories: Vec<PathBuf>,
    /// The scripted autopilot driving these tracks (seeds or map indices,
    /// e.g. `0..16`): demonstrations without a human.
    #[arg(long)]
    pub autopilot: Option<String>,
    /// TMInterface input files (`.inputs`).
    pub files: Vec<PathBuf>,
}

/// The track an input file is for: `--track`, the map its name
/// (`<map>_<anything>.inputs`, as `best_runs`' `<map>_<seconds>.inputs`)
/// names, or the config's only map.
fn track_of(cfg: &Config, file: &Path, given: Option<u64>) -> Result<u64, BadInput> {
    if let Some(t) = given {
        return Ok(t);
    }
    let prompts: Vec<u64> = match cfg.environment.kind {
        EnvKind::Sim => cfg.environment.sim.track_seeds.clone(),
        EnvKind::Tmi => (0..cfg.environment.tmi.maps.len() as u64).collect(),
    };
    // `<map>_<anything>.inputs`, the map as a file name writes it
    // (`rulka_run::map_key`): a best run's `<map>_<seconds>` among them.
    let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    if let Some((map, _)) = stem.rsplit_once('_') {
        if let Some(&p) = prompts.iter().find(|&&p| rulka_run::map_key(&prompt_name(cfg, p)) == map)
        {
            return Ok(p);
        }
    }
    match prompts.as_slice() {
        [only] => Ok(*only),
        _ => Err(BadInput(format!(
            "{}: its name names none of the config's maps ({}); pass --track SEED",
            file.display(),
            config_maps(cfg).join(", ")
        ))),
    }
}

fn describe(d: &Demo) -> String {
    match d.race_time_ms {
        Some(t) => format!("{} steps, finished in {:.2} s", d.len(), t / 1000.0),
        None => format!("{} steps, not finished ({:.0} m)", d.len(), d.meters(d.len() - 1)),
    }
}

fn record_all<E: Environment>(
    cfg: &Config,
    env: &mut E,
    a: &RecordArgs,
) -> anyhow::Result<Vec<Demo>> {
    let bad = |e: DemoError| -> anyhow::Error {
        match e.kind() {
            rulka_error::ErrorKind::BadInput => BadInput(e.to_string()).into(),
            _ => e.into(),
        }
    };
    let mut demos = Vec::new();
    for f in &a.files {
        let text =
            std::fs::read_to_string(f).map_err(|e| BadInput(format!("{}: {e}", f.display())))?;
        let track = track_of(cfg, f, a.track)?;
        let d = drive_script(cfg, env, track, &f.display().to_string(), &text).map_err(bad)?;
        println!("recorded {} on {}: {}", f.display(), d.map, describe(&d));
        demos.push(d);
    }
    if let Some(seeds) = &a.autopilot {
        let seeds =
            parse_seeds(seeds).map_err(|e| BadInput(format!("--autopilot {seeds}: {e}")))?;
        for s in seeds {
            let d = drive_autopilot(cfg, env, s).map_err(bad)?;
            println!("recorded the autopilot on {}: {}", d.map, describe(&d));
            demos.push(d);
        }
    }
    for f in &a.trajectories {
        let text =
            std::fs::read_to_string(f).map_err(|e| BadInput(format!("{}: {e}", f.display())))?;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let at = format!("{}:{}", f.display(), i + 1);
            let saved = SavedTrajectory::from_json_line(cfg, line)
                .map_err(|e| BadInput(format!("{at}: {e:#}")))?;
            // Named as the run names it, when the run saved its name.
            let source = match saved.id {
                Some(id) => format!(
                    "{at} (start {}, collector {}, incarnation {}, trajectory {})",
                    id.start, id.collector, id.incarnation, id.sequence
                ),
                None => at,
            };
            let d = replay_saved(cfg, env, &saved, &source).map_err(bad)?;
            println!("recorded {source} on {}: {}", d.map, describe(&d));
            demos.push(d);
        }
    }
    Ok(demos)
}

/// Runs `rulka demos record`.
pub fn record(a: &RecordArgs) -> anyhow::Result<()> {
    let mut cfg = load_config(&a.config)?;
    if a.files.is_empty() && a.trajectories.is_empty() && a.autopilot.is_none() {
        return Err(BadInput(
            "nothing to record: name .inputs files, --trajectories FILE or --autopilot SEEDS"
                .into(),
        )
        .into());
    }
    match a.env {
        Some(EnvChoice::Sim) => cfg.environment.kind = EnvKind::Sim,
        Some(EnvChoice::Tmi) => cfg.environment.kind = EnvKind::Tmi,
        None => {}
    }
    let demos = match cfg.environment.kind {
        EnvKind::Sim => record_all(&cfg, &mut SimEnv::new(&cfg), a)?,
        EnvKind::Tmi => {
            let port = a.port.ok_or_else(|| {
                BadInput("--env tmi needs --port (the game's TMInterface plugin)".into())
            })?;
            let mut env = TmiEnv::connect(&cfg, &a.host, port)?;
            record_all(&cfg, &mut env, a)?
        }
    };
    let written = write_demos(&a.out, &demos)?;
    let pairs: usize = demos.iter().map(|d| d.len().saturating_sub(1)).sum();
    println!(
        "wrote {} demonstration shard(s) to {} ({pairs} state-action pairs, network {})",
        written.len(),
        a.out.display(),
        cfg.network_hash()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_best_runs_file_names_its_map_even_when_the_maps_name_is_not_a_file_name() {
        let cfg = Config::from_yaml_str(
            "environment:\n  kind: tmi\n  tmi:\n    maps:\n      - {name: map5, map_path: map5.Challenge.Gbx, zone_centers: maps/map5.npy}\n      - {name: \"A06 Race #2\", map_path: a06.Challenge.Gbx, zone_centers: maps/a06.npy}\n      - {name: x_1.5, map_path: x.Challenge.Gbx, zone_centers: maps/x.npy}\n",
            "t",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let of = |name: &str| track_of(&cfg, Path::new(name), None).map_err(|e| e.0);
        assert_eq!(of("runs/r/best_runs/A06_Race__2_45.51.inputs"), Ok(1));
        assert_eq!(of("best_runs/map5_30.00.inputs"), Ok(0));
        assert_eq!(of("x_1.5_12.34.inputs"), Ok(2), "an underscore and a dot in the name");
        assert_eq!(of("demos/map5_flat.inputs"), Ok(0), "any file named after its map");
        assert!(of("other_1.00.inputs").unwrap_err().contains("names none of the config's maps"));
        assert_eq!(track_of(&cfg, Path::new("other_1.00.inputs"), Some(2)).map_err(|e| e.0), Ok(2));
    }
}
