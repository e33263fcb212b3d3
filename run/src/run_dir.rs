//! The run directory: `config.yaml` (snapshot), `run.json` (where a live
//! trainer's transport is), `state/` (learner state, see
//! `rulka_learner::state`), `weights.safetensors` and `model.onnx` (latest
//! policy), `tensorboard/`, `pretrain.json` and `bc_heads.safetensors` (a
//! run `rulka pretrain` started), `trajectories.csv` (one row per received
//! trajectory), `starts.json` (every start of the run, numbered:
//! [`crate::Start`]), `summary.json`, `logs/collector<i>.log`, `nats/` (the local
//! NATS server's store and log, when it runs one), `imported.json` (a run
//! brought over from the original).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rulka_collector::RunLayout;
use rulka_config::Config;
use serde::{Deserialize, Serialize};

use crate::BadInput;

/// A run directory, the one place that names its files: every writer and
/// reader of a run file finds its path here (the tables' rows are read by
/// [`crate::read_trajectories`] and [`crate::read_heldout`]). Cheap to make
/// from a path; it touches nothing until asked.
///
/// ```
/// let run = rulka_run::RunDir::new("runs/sim-quick");
/// assert_eq!(run.trajectories_csv(), std::path::Path::new("runs/sim-quick/trajectories.csv"));
/// assert!(!run.has_state()); // no learner state saved there
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir(PathBuf);

impl RunDir {
    /// The run directory at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self(root.into())
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.0
    }

    /// `config.yaml`: the run's config, as resolved when it started.
    pub fn config_yaml(&self) -> PathBuf {
        self.0.join("config.yaml")
    }

    /// `starts.json`: every start of the run, numbered ([`crate::Start`]).
    pub fn starts_json(&self) -> PathBuf {
        self.0.join("starts.json")
    }

    /// `run.json`: where a live trainer's transport is ([`RunInfo`]).
    pub fn run_json(&self) -> PathBuf {
        self.0.join("run.json")
    }

    /// `state/`: the learner's state (`rulka_learner::state`).
    pub fn state(&self) -> PathBuf {
        self.0.join("state")
    }

    /// Whether `state/` holds a saved learner state (its `LATEST` pointer).
    pub fn has_state(&self) -> bool {
        self.state().join("LATEST").exists()
    }

    /// `weights.safetensors`: the current weights.
    pub fn weights(&self) -> PathBuf {
        self.0.join("weights.safetensors")
    }

    /// `model.onnx`: the current policy for collectors.
    pub fn model_onnx(&self) -> PathBuf {
        self.0.join("model.onnx")
    }

    /// `tensorboard/`: the event files.
    pub fn tensorboard(&self) -> PathBuf {
        self.0.join("tensorboard")
    }

    /// `trajectories.csv`: one row per trajectory received (written and read
    /// by [`crate::read_trajectories`]'s module).
    pub fn trajectories_csv(&self) -> PathBuf {
        self.0.join("trajectories.csv")
    }

    /// `heldout.csv`: one row per greedy evaluation on the held-out tracks.
    pub fn heldout_csv(&self) -> PathBuf {
        self.0.join("heldout.csv")
    }

    /// `summary.json`: the figures of the run's summary.
    pub fn summary_json(&self) -> PathBuf {
        self.0.join("summary.json")
    }

    /// `best_runs/`: the best race per map as an input file.
    pub fn best_runs(&self) -> PathBuf {
        self.0.join("best_runs")
    }

    /// `logs/`: each local collector's log and heartbeat.
    pub fn logs(&self) -> PathBuf {
        self.0.join("logs")
    }

    /// Heartbeat file of local collector `id`.
    pub fn heartbeat(&self, id: u32) -> PathBuf {
        self.logs().join(format!("collector{id}.heartbeat"))
    }

    /// `nats/`: the local NATS server's store and log.
    pub fn nats(&self) -> PathBuf {
        self.0.join("nats")
    }

    /// `imported.json`: where a run brought over from the original came
    /// from and what its save folder carried that rulka keeps no other
    /// record of (`rulka import`; read back by `rulka export --torch`).
    pub fn imported_json(&self) -> PathBuf {
        self.0.join("imported.json")
    }

    /// `pretrain.json`: what `rulka pretrain` trained the run's first
    /// weights on and how it went.
    pub fn pretrain_json(&self) -> PathBuf {
        self.0.join("pretrain.json")
    }

    /// `bc_heads.safetensors`: the behaviour-cloning offset heads
    /// (`bc_heads.{i}.weight|bias`) `rulka pretrain` averaged into the
    /// policy head, when `pretrain.bc_time_offsets_ms` has several offsets.
    pub fn bc_heads(&self) -> PathBuf {
        self.0.join("bc_heads.safetensors")
    }

    /// `maps-cache/`: the maps a remote collector fetched from the run.
    pub fn maps_cache(&self) -> PathBuf {
        self.0.join("maps-cache")
    }

    /// Removes what a previous run left (`--fresh`): its state, event
    /// files, NATS store, maps cache and tables, weights and summary (and
    /// the older `best.onnx` / `best.json`); the snapshot `config.yaml` is
    /// rewritten by the new run, and files that are not the run's stay.
    /// `imported.json` goes too: a fresh run carries nothing of an import.
    pub fn clear_previous_run(&self) {
        for dir in [self.state(), self.tensorboard(), self.nats(), self.maps_cache()] {
            let _ = std::fs::remove_dir_all(dir);
        }
        for file in [
            self.trajectories_csv(),
            self.starts_json(),
            self.summary_json(),
            self.model_onnx(),
            self.weights(),
            self.heldout_csv(),
            self.imported_json(),
            self.0.join("best.onnx"),
            self.0.join("best.json"),
        ] {
            let _ = std::fs::remove_file(file);
        }
    }

    /// A fresh folder beside the run, `.{name}.{purpose}-{pid}`, in which a
    /// command builds a whole run before renaming it onto [`Self::root`], so
    /// a command killed midway leaves the run as it was. Creates the parent;
    /// removes the `purpose` staging folders of processes that are gone (and
    /// this process's own, left by an earlier try). Not created itself.
    ///
    /// # Errors
    /// [`BadInput`] naming the parent when it cannot be created.
    pub fn staging(&self, purpose: &str) -> Result<PathBuf, BadInput> {
        let name = self.0.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let parent = match self.0.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent)
            .map_err(|e| BadInput(format!("creating {}: {e}", parent.display())))?;
        let prefix = format!(".{name}.{purpose}-");
        let me = std::process::id();
        for e in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
            let file = e.file_name().to_string_lossy().into_owned();
            let pid = file.strip_prefix(&prefix).and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| p == me || !rulka_shm::process_alive(p)) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        Ok(parent.join(format!("{prefix}{me}")))
    }

    /// `run.json`, read ([`RunInfo::read`]).
    pub fn info(&self) -> anyhow::Result<RunInfo> {
        RunInfo::read(&self.0)
    }

    /// `summary.json`, parsed.
    pub fn summary(&self) -> anyhow::Result<serde_json::Value> {
        let p = self.summary_json();
        let text =
            std::fs::read_to_string(&p).map_err(|e| BadInput(format!("{}: {e}", p.display())))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    }
}

/// `RUN_DIR/imported.json`: where a run brought over from the original came
/// from (`rulka import`) and what of its save folder rulka keeps no other
/// record of; `rulka export --torch` writes these figures back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Imported {
    /// The save folder.
    pub source: PathBuf,
    /// The files read from it.
    pub files: Vec<String>,
    /// What the import adapted or left out, one line each.
    pub notes: Vec<String>,
    /// Frames played (`cumul_number_frames_played`).
    pub frames: u64,
    /// RAdam's step count, when the folder had the optimizer's state.
    pub optimizer_step: Option<u64>,
    /// The loss scale, when the folder had an enabled scaler's state.
    pub loss_scale: Option<f64>,
    /// Its growth tracker (finite steps since the scale last changed).
    #[serde(default)]
    pub loss_scale_growth_tracker: Option<i64>,
    /// `cumul_training_hours`.
    pub training_hours: Option<f64>,
    /// `alltime_min_ms`: best race time per map, ms.
    pub best_ms: std::collections::BTreeMap<String, f64>,
    /// `rolling_mean_ms`: rolling mean race time per map, ms.
    pub rolling_mean_ms: std::collections::BTreeMap<String, f64>,
}

impl RunDir {
    /// `imported.json`, read; `None` for a run that was not imported. A
    /// record that is there but cannot be read or parsed is an error naming
    /// the file (its figures would otherwise be lost without a word).
    pub fn imported(&self) -> anyhow::Result<Option<Imported>> {
        let p = self.imported_json();
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(BadInput(format!("{}: {e}", p.display())).into()),
        };
        let imported = serde_json::from_slice(&bytes)
            .map_err(|e| BadInput(format!("{}: not a record of an import: {e}", p.display())))?;
        Ok(Some(imported))
    }

    /// Writes `imported.json` (atomically).
    pub fn write_imported(&self, imported: &Imported) -> anyhow::Result<()> {
        rulka_checkpoint::write_atomic(
            &self.imported_json(),
            serde_json::to_string_pretty(imported)?.as_bytes(),
        )?;
        Ok(())
    }
}

/// Where a live trainer's transport is (`RUN_DIR/run.json`): what `rulka
/// collect --run DIR` attaches to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    /// Id of this trainer incarnation's segments.
    pub run_id: u64,
    /// Directory of the segment files (shared memory).
    pub shm_dir: PathBuf,
    /// The trainer's pid.
    pub trainer_pid: u32,
    /// The NATS server and run, when the transport is NATS.
    #[serde(default)]
    pub nats: Option<NatsInfo>,
    /// The run's local collector slots as this trainer runs it
    /// (`collectors.count`, or `rulka train --collectors`): the config
    /// snapshot holds the config's own count. Absent in older files.
    #[serde(default)]
    pub collectors: Option<u32>,
}

/// How collectors reach a run over NATS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NatsInfo {
    /// Server URL.
    pub url: String,
    /// The run's name on the server.
    pub run: String,
    /// Collector user (the local server's), when it has one.
    pub user: Option<String>,
    /// Its password (the file is written readable by its owner only).
    pub password: Option<String>,
    /// The pid of the local `nats-server` the trainer started, if it did.
    #[serde(default)]
    pub server_pid: Option<u32>,
}

impl RunInfo {
    fn path(run: &Path) -> PathBuf {
        RunDir::new(run).run_json()
    }

    /// Reads `RUN_DIR/run.json`.
    pub fn read(run: &Path) -> anyhow::Result<Self> {
        let p = Self::path(run);
        let text = std::fs::read_to_string(&p).map_err(|e| {
            BadInput(format!("{}: {e} (is a trainer running on this run directory?)", p.display()))
        })?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    }

    /// Writes `RUN_DIR/run.json` atomically, readable by its owner only
    /// (it may hold the collectors' NATS password).
    pub fn write(&self, run: &Path) -> anyhow::Result<()> {
        let p = Self::path(run);
        rulka_checkpoint::write_atomic(&p, serde_json::to_string_pretty(self)?.as_bytes())?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
        }
        Ok(())
    }

    /// Removes `RUN_DIR/run.json` (the trainer stopped).
    pub fn remove(run: &Path) {
        let _ = std::fs::remove_file(Self::path(run));
    }

    /// The run's shared-memory layout for `cfg`.
    pub fn layout(&self, cfg: &Config) -> RunLayout {
        RunLayout::new(cfg, &self.shm_dir, self.run_id)
    }

    /// Heartbeat file of collector `id`.
    pub fn heartbeat_path(run: &Path, id: u32) -> PathBuf {
        RunDir::new(run).heartbeat(id)
    }
}

/// Where shared-memory segments go: `$RULKA_SHM_ROOT` when set (another
/// tmpfs; the tests give each trainer run a root of its own), else
/// `/dev/shm`, else the temp directory. A trainer's start removes dead
/// runs' directories under it.
pub fn shm_root() -> PathBuf {
    if let Some(root) = std::env::var_os("RULKA_SHM_ROOT").filter(|r| !r.is_empty()) {
        return PathBuf::from(root);
    }
    let dev = PathBuf::from("/dev/shm");
    if dev.is_dir() {
        dev
    } else {
        std::env::temp_dir()
    }
}

/// One line per run directory a shared-memory scan found: what happened to
/// it (removed, would be removed, live) and why, its size and its run.
pub fn describe_gc(found: &[rulka_shm::RunShmDir], dry_run: bool) -> Vec<String> {
    use rulka_shm::RunShmVerdict;
    found
        .iter()
        .map(|f| {
            let (what, why) = match &f.verdict {
                RunShmVerdict::Live { why } => ("live, kept", why),
                RunShmVerdict::Stale { why } if f.removed => ("removed", why),
                RunShmVerdict::Stale { why } if dry_run => ("would remove", why),
                RunShmVerdict::Stale { why } => ("stale, not removed", why),
            };
            let run = f
                .owner
                .as_ref()
                .map_or(String::new(), |o| format!(", run {}", o.run_dir.display()));
            format!(
                "  {what:<13} {} ({:.1} MB): {why}{run}",
                f.path.display(),
                f.bytes as f64 / 1e6
            )
        })
        .collect()
}

/// Removes the shared memory of dead runs under [`shm_root`] (any run
/// directory's: see [`rulka_shm::collect_stale`]) and says what it removed.
pub fn remove_stale_shm() {
    match rulka_shm::collect_stale(&shm_root(), false) {
        Ok(found) => {
            let removed: Vec<_> = found.into_iter().filter(|f| f.removed).collect();
            for line in describe_gc(&removed, false) {
                tracing::info!("[rulka train] stale shared memory of a dead run:{line}");
            }
        }
        Err(e) => tracing::warn!("[rulka train] scanning for stale shared memory: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_import_record_reads_back_and_a_damaged_one_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = RunDir::new(dir.path());
        assert!(run.imported().expect("no record is not an error").is_none());

        let mut best_ms = std::collections::BTreeMap::new();
        best_ms.insert("map5".to_owned(), 47_100.0);
        let rec =
            Imported { frames: 123_456, loss_scale: Some(1024.0), best_ms, ..Imported::default() };
        run.write_imported(&rec).expect("write");
        assert_eq!(run.imported().expect("read"), Some(rec));

        std::fs::write(run.imported_json(), b"{\"frames\": 12").expect("write");
        let e = run.imported().expect_err("a cut record").to_string();
        assert!(e.contains("imported.json") && e.contains("not a record of an import"), "{e}");
    }

    #[test]
    fn staging_sits_beside_the_run_and_clears_only_dead_tries_of_its_purpose() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runs = dir.path().join("runs");
        let run = RunDir::new(runs.join("map5"));
        let me = std::process::id();
        let staging = run.staging("importing").expect("the parent is created");
        assert_eq!(staging, runs.join(format!(".map5.importing-{me}")));
        assert!(runs.is_dir() && !staging.exists(), "parent made, staging folder not");

        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let dead = child.id();
        child.wait().expect("wait");
        let live = std::os::unix::process::parent_id();
        for n in [
            format!(".map5.importing-{dead}"),
            format!(".map5.importing-{me}"),
            format!(".map5.importing-{live}"),
            format!(".map5.pretraining-{dead}"),
            format!(".map6.importing-{dead}"),
            ".map5.importing-x".to_owned(),
        ] {
            std::fs::create_dir_all(runs.join(n).join("state")).expect("mkdir");
        }
        assert_eq!(run.staging("importing").expect("staging"), staging);
        let mut left: Vec<String> = std::fs::read_dir(&runs)
            .expect("read")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = vec![
            format!(".map5.importing-{live}"),
            format!(".map5.pretraining-{dead}"),
            format!(".map6.importing-{dead}"),
            ".map5.importing-x".to_owned(),
        ];
        want.sort();
        assert_eq!(left, want);

        // What `rulka pretrain` writes beside the usual files, by name.
        assert_eq!(run.pretrain_json(), runs.join("map5/pretrain.json"));
        assert_eq!(run.bc_heads(), runs.join("map5/bc_heads.safetensors"));

        let here = RunDir::new("map7").staging("pretraining").expect("relative run");
        assert_eq!(here, Path::new(".").join(format!(".map7.pretraining-{me}")));

        let file = dir.path().join("a-file");
        std::fs::write(&file, b"").expect("write");
        let e = RunDir::new(file.join("run")).staging("importing").expect_err("a file as parent");
        assert!(e.to_string().contains("a-file"), "{e}");
    }
}
