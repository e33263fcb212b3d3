//! Making a run directory ready for `rulka train`: a new run's config
//! snapshot, or a resumed one's (the directory's files are named by
//! [`rulka_run::RunDir`]).

use rulka_config::Config;
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::options::TrainOptions;
use crate::{BadInput, RunDir};
use rulka_run::load_config_unvalidated;

/// The config, the run directory and whether it resumes: `--config` starts
/// a run (refusing to overwrite one unless `--fresh`), `--resume` continues
/// one from its checkpoint (refusing a missing one unless `--fresh`).
pub fn prepare_run_dir(args: &TrainOptions) -> anyhow::Result<(Config, PathBuf, bool)> {
    match (&args.config, &args.resume) {
        (Some(_), Some(_)) => Err(BadInput(
            "--config and --resume: a resumed run uses its own config snapshot; pass one of them"
                .into(),
        )
        .into()),
        (None, None) => {
            Err(BadInput("pass --config FILE (a new run) or --resume RUN_DIR".into()).into())
        }
        (None, Some(dir)) => {
            let run = RunDir::new(dir);
            let snap = run.config_yaml();
            if !dir.is_dir() {
                return Err(
                    BadInput(format!("--resume {}: no such run directory", dir.display())).into()
                );
            }
            if !snap.is_file() {
                return Err(BadInput(format!(
                    "--resume {}: not a rulka run (no config.yaml)",
                    dir.display()
                ))
                .into());
            }
            let cfg = load_config_unvalidated(&snap)?;
            let mut flagged = cfg.clone();
            crate::train::apply_flags(&mut flagged, args);
            crate::train::check_with_flags(&flagged)?;
            if !run.has_state() && !args.fresh {
                return Err(BadInput(format!(
                    "--resume {}: no checkpoint ({} is missing); pass --fresh to start this run over",
                    dir.display(),
                    run.state().join("LATEST").display()
                ))
                .into());
            }
            Ok((cfg, dir.clone(), true))
        }
        (Some(path), None) => {
            let cfg = load_config_unvalidated(path)?;
            // Validated with the flags before anything is written.
            let mut flagged = cfg.clone();
            crate::train::apply_flags(&mut flagged, args);
            crate::train::check_with_flags(&flagged)?;
            let dir = args.run_dir.clone().unwrap_or_else(|| cfg.training.run_dir.clone());
            let run = RunDir::new(&dir);
            if run.has_state() {
                if !args.fresh {
                    return Err(BadInput(format!(
                        "{} already holds a run; continue it with `--resume {}` or start over with --fresh",
                        dir.display(),
                        dir.display()
                    ))
                    .into());
                }
                run.clear_previous_run();
                tracing::info!("{}", fresh_note(&dir, &crate::BestRuns::times(&dir)));
            }
            std::fs::create_dir_all(&dir)
                .map_err(|e| BadInput(format!("creating {}: {e}", dir.display())))?;
            let mut snap_cfg = cfg.clone();
            snap_cfg.training.run_dir = dir.clone();
            rulka_checkpoint::write_atomic(&run.config_yaml(), snap_cfg.to_yaml().as_bytes())?;
            Ok((snap_cfg, dir, false))
        }
    }
}

/// What `--fresh` says it did to the run in `dir`: what it cleared, and
/// the best drives it kept (`best_runs/`, `kept`: race time per map): the
/// best ever made on each map stay, and a drive of the new run replaces one
/// only by beating it.
pub(crate) fn fresh_note(dir: &std::path::Path, kept: &BTreeMap<String, f64>) -> String {
    let kept = if kept.is_empty() {
        "no best drives were kept (best_runs/ is empty)".to_string()
    } else {
        let maps: Vec<String> = kept.iter().map(|(m, t)| format!("{m} {t:.2} s")).collect();
        format!(
            "kept best_runs/, the best drive ever made on each map ({}): the new run replaces one only by beating it",
            maps.join(", ")
        )
    };
    format!(
        "[rulka train] --fresh: cleared the previous run in {} (its learner state, weights, model, tables, TensorBoard events, summary, NATS store); {kept}",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn fresh_clears_the_previous_runs_results_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = dir.path().join("run");
        std::fs::create_dir_all(run.join("state")).expect("mkdir");
        let old = [
            "state/LATEST",
            "heldout.csv",
            "best.onnx",
            "best.json",
            "summary.json",
            "imported.json",
        ];
        std::fs::create_dir_all(run.join("best_runs")).expect("mkdir");
        for f in old.iter().chain(&["notes.txt", "best_runs/map5_47.10.inputs"]) {
            std::fs::write(run.join(f), b"old").expect("write");
        }
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sim-quick.yaml");
        let args = TrainOptions {
            config: Some(config),
            run_dir: Some(run.clone()),
            ..TrainOptions::default()
        };
        let refused = prepare_run_dir(&args).expect_err("an existing run without --fresh");
        assert!(refused.to_string().contains("--resume"), "{refused}");
        assert!(run.join("heldout.csv").exists(), "a refused start must not delete anything");

        let (_, got, resumed) =
            prepare_run_dir(&TrainOptions { fresh: true, ..args }).expect("--fresh");
        assert_eq!((got, resumed), (run.clone(), false));
        for f in old {
            assert!(!run.join(f).exists(), "--fresh left {f} of the previous run");
        }
        assert!(run.join("notes.txt").exists(), "--fresh removed a file that is not the run's");
        assert!(run.join("best_runs/map5_47.10.inputs").exists(), "--fresh keeps the best drives");
        assert!(run.join("config.yaml").is_file());
    }

    #[test]
    fn fresh_says_what_it_cleared_and_which_best_drives_it_kept() {
        let dir = Path::new("runs/a");
        let none = fresh_note(dir, &BTreeMap::new());
        assert!(none.contains("cleared the previous run in runs/a"), "{none}");
        assert!(none.contains("no best drives were kept"), "{none}");
        let kept = BTreeMap::from([("A01".to_string(), 24.47), ("map5".to_string(), 47.1)]);
        let note = fresh_note(dir, &kept);
        assert!(
            note.contains("kept best_runs/") && note.contains("A01 24.47 s, map5 47.10 s"),
            "{note}"
        );
    }
}
