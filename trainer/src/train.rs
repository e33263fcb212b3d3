//! `rulka train`'s setup and teardown: the config with its overrides
//! checked, the run directory locked, the learner created or resumed, the
//! transport opened — then the [`crate::trainer::Trainer`] runs, and the
//! transport, `run.json` and the lock are released whatever happened.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use rulka_collector::RunLayout;
use rulka_config::{Config, EnvKind, LearnerDevice, TransportKind};
use rulka_learner::Learner;
use rulka_shm::{ProcessLock, ShmError};
use tch::Device;

use crate::options::TrainOptions;
use crate::run_dir::prepare_run_dir;
use crate::supervisor::{Launcher, Supervisor};
use crate::trainer::Trainer;
use crate::BadInput;
use rulka_run::RunInfo;

/// Runs `rulka train`: local collectors are started by `launcher`. Returns
/// the summary to show the user (`summary.json` says the same for programs).
pub fn run(opts: &TrainOptions, launcher: Launcher) -> anyhow::Result<String> {
    rulka_shm::install_stop_handler();
    // A second Ctrl-C exits at once: every file the trainer writes is
    // atomic, and a checkpoint's state and summary are written together.
    std::thread::spawn(|| loop {
        if rulka_shm::stop_requests() >= 2 {
            tracing::info!(
                "\n[rulka train] second interrupt: exiting now (last checkpoint stays valid)"
            );
            exit_between_checkpoints(Duration::from_secs(10));
        }
        std::thread::sleep(Duration::from_millis(50));
    });
    let (cfg, run_dir, resuming) = configure(opts)?;
    let lock = ProcessLock::acquire(&run_dir.join("trainer.lock")).map_err(|e| match e {
        ShmError::LockHeld { pid, .. } => anyhow::Error::from(BadInput(format!(
            "{}: another trainer (pid {pid}) is running on this run directory",
            run_dir.display()
        ))),
        e => anyhow::Error::from(e).context("locking the run directory"),
    })?;
    let mut learner = open_learner(&cfg, &run_dir, resuming)?;
    let start = begin_start(&run_dir, &learner, resuming)?;
    let chunk = RunLayout::chunk_layout(&cfg);
    let mut endpoints = crate::transport::open(&cfg, &run_dir, chunk, !resuming)?;
    let result = (|| {
        endpoints.info.write(&run_dir)?;
        crate::weights::publish(&cfg, &learner, &mut *endpoints.weights, true)?;
        let hb_timeout = Duration::from_millis(u64::from(cfg.collectors.heartbeat_timeout_ms));
        let sup = Supervisor::new(&run_dir, launcher, cfg.collectors.count, hb_timeout)
            .with_first_incarnations(&next_incarnations(&run_dir, cfg.collectors.count)?);
        Trainer::new(&cfg, opts, &run_dir, sup, &mut learner, &mut endpoints, start)?.run()
    })();
    endpoints.close();
    RunInfo::remove(&run_dir);
    lock.release();
    result
}

/// Exits with code 130 once no checkpoint is being written (waiting at most
/// `limit` for one to end: a hung disk must not hold a second Ctrl-C), the
/// checkpoint lock kept to the end so none starts after.
fn exit_between_checkpoints(limit: Duration) -> ! {
    let t0 = std::time::Instant::now();
    loop {
        match crate::weights::CHECKPOINTING.try_lock() {
            Ok(held) => {
                std::mem::forget(held);
                break;
            }
            Err(std::sync::TryLockError::WouldBlock) if t0.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => break,
        }
    }
    rulka_shm::exit_now(130)
}

/// The run's config with the options' overrides, checked (bad input is
/// [`BadInput`], said once, before anything starts); its run directory;
/// whether it resumes.
fn configure(opts: &TrainOptions) -> anyhow::Result<(Config, PathBuf, bool)> {
    let (mut cfg, run_dir, resuming) = prepare_run_dir(opts)?;
    apply_flags(&mut cfg, opts);
    check_with_flags(&cfg)?;
    if cfg.environment.kind == EnvKind::Sim && cfg.environment.sim.track_from.is_some() {
        // The map's track is built here once, not in every collector: a line
        // that cannot be a track is bad input, said once (collectors would
        // fail at start and be restarted forever).
        let mut sim = rulka_env::SimEnv::new(&cfg);
        rulka_env::Environment::reset(&mut sim, 0)
            .map_err(|e| BadInput(format!("environment.sim.track_from: {e}")))?;
    }
    if cfg.environment.kind == EnvKind::Tmi {
        tracing::info!(
            "[rulka train] environment.kind tmi: collectors connect to TMInterface on ports {}..",
            cfg.environment.tmi.base_port
        );
    }
    Ok((cfg, run_dir, resuming))
}

/// Numbers this start of the run (`starts.json`: how it began, the state it
/// began from, how the start before it ended) and marks the table rows it
/// throws away (written after the state it resumes from), saying so.
/// Returns its number.
fn begin_start(run_dir: &Path, learner: &Learner, resuming: bool) -> anyhow::Result<u32> {
    let run = crate::RunDir::new(run_dir);
    let before = rulka_run::Start::read(run_dir)?;
    let how = match (resuming, before.is_empty()) {
        (false, _) => "fresh",
        (true, true) if run.imported_json().exists() => "resumed after rulka import",
        (true, true) if run_dir.join("pretrain.json").exists() => "resumed after rulka pretrain",
        (true, _) => "resumed",
    };
    let state = std::fs::read_to_string(run.state().join("LATEST"))
        .ok()
        .filter(|_| resuming)
        .map(|n| format!("state/{}", n.trim()));
    let from = rulka_run::StateAt { frames: learner.frames, updates: learner.updates, state };
    let start = rulka_run::Start::begin(run_dir, how, from, rulka_run::unix_now())?;
    let starts = rulka_run::Start::read(run_dir)?;
    let (rows, evals) = rulka_run::mark_thrown_away(run_dir, &starts)?;
    let previous = starts
        .iter()
        .rev()
        .nth(1)
        .and_then(|p| p.ended.as_ref().map(|e| format!("; start {} ended {}", p.start, e.reason)))
        .unwrap_or_default();
    tracing::info!(
        "[rulka train] start {} of the run ({how}, from {} frames, {} updates){previous}",
        start.start,
        start.from.frames,
        start.from.updates
    );
    if rows + evals > 0 {
        tracing::info!(
            "[rulka train] {rows} trajectories and {evals} held-out evaluations were recorded after the state this start resumes from: kept in the tables, marked thrown_away_by, left out of the run's curves and figures"
        );
    }
    Ok(start.start)
}

/// The first incarnation of each local collector slot: one past the
/// highest its rows in `trajectories.csv` carry, so that a collector's
/// trajectory ids never repeat within the run (over NATS the server counts
/// them, whatever the trainer).
fn next_incarnations(run_dir: &Path, slots: u32) -> anyhow::Result<Vec<u32>> {
    let mut next = vec![0u32; slots as usize];
    for r in crate::read_trajectories_so_far(run_dir)? {
        let id = rulka_shm::TrajectoryId::unpack(r.collector, r.trajectory);
        if let Some(n) = next.get_mut(id.collector as usize) {
            *n = (*n).max(id.incarnation + 1);
        }
    }
    Ok(next)
}

/// The command line's settings over the config's: `--collectors`,
/// `--transport`, `--nats-url` (the run's `config.yaml` keeps its own).
pub(crate) fn apply_flags(cfg: &mut Config, opts: &TrainOptions) {
    if let Some(n) = opts.collectors {
        cfg.collectors.count = n;
    }
    if let Some(kind) = opts.transport {
        cfg.transport.kind = kind;
    }
    if let Some(url) = &opts.nats_url {
        cfg.transport.nats.url = Some(url.clone());
    }
}

/// The config's value rules, on the config as the flags made it (a file
/// asking for 0 local collectors is right with `--transport nats`).
pub(crate) fn check_with_flags(cfg: &Config) -> anyhow::Result<()> {
    if cfg.collectors.count == 0 && cfg.transport.kind == TransportKind::Shm {
        return Err(BadInput(
            "collectors.count is 0: nothing would feed the learner (0 local collectors needs transport.kind nats)".into(),
        )
        .into());
    }
    if let Some(p) = cfg.validate().first() {
        return Err(BadInput(format!("{p}")).into());
    }
    Ok(())
}

/// The learner: resumed from `RUN_DIR/state` or new (pretrained parts
/// loaded), on the device `training.device` names ([`learner_device`]),
/// with `training.learner_threads` resolved against this machine's cores and
/// the local collectors' threads.
fn open_learner(cfg: &Config, run_dir: &Path, resuming: bool) -> anyhow::Result<Learner> {
    let device = learner_device(cfg.training.device).map_err(BadInput)?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads =
        cfg.training.learner_threads.resolve(cores, collector_threads(cfg), device.is_cuda());
    // Eager training never uses libtorch's inter-op pool: one thread, not
    // one per core beside the collectors (settable once per process).
    static INTEROP: std::sync::Once = std::sync::Once::new();
    INTEROP.call_once(|| tch::set_num_interop_threads(1));
    tch::set_num_threads(threads as i32);
    rulka_learner::tune_allocator();
    tracing::info!(
        "[rulka train] learner on {}, {threads} thread(s) ({cores} cores, {} local collector(s) × {} thread(s))",
        device_name(device),
        cfg.collectors.count,
        cfg.inference.intra_op_threads.max(1)
    );
    let run = crate::RunDir::new(run_dir);
    let state_dir = run.state();
    let learner = if resuming && run.has_state() {
        let l = Learner::resume(cfg, &state_dir, device)
            .with_context(|| format!("resuming from {}", state_dir.display()))?;
        tracing::info!(
            "[rulka train] resumed {}: {} frames, {} updates",
            run_dir.display(),
            l.frames,
            l.updates
        );
        l
    } else {
        Learner::new_pretrained(cfg, device, cfg.training.seed)
            .map_err(|e| BadInput(format!("{e:#}")))?
    };
    let frozen = learner.network().frozen_parameter_names();
    if !frozen.is_empty() {
        tracing::info!(
            "[rulka train] {} parameter tensors frozen (nn.vis.freeze / nn.encoder.freeze), e.g. {}",
            frozen.len(),
            frozen[0]
        );
    }
    Ok(learner)
}

/// The threads the local collectors' ONNX Runtime sessions use:
/// `collectors.count × inference.intra_op_threads` (at least 1 each).
fn collector_threads(cfg: &Config) -> usize {
    cfg.collectors.count as usize * cfg.inference.intra_op_threads.max(1) as usize
}

/// The learner's device for `training.device`: `auto` is CUDA when libtorch
/// sees a GPU, else the CPU; `cuda` that cannot be had is an error naming
/// what is missing (the `cuda` feature, or libtorch's CUDA library seeing no
/// GPU).
pub fn learner_device(asked: LearnerDevice) -> Result<Device, String> {
    let available = tch::Cuda::is_available();
    match asked {
        LearnerDevice::Cpu => Ok(Device::Cpu),
        LearnerDevice::Auto if available => Ok(Device::Cuda(0)),
        LearnerDevice::Auto => Ok(Device::Cpu),
        LearnerDevice::Cuda if available => Ok(Device::Cuda(0)),
        LearnerDevice::Cuda if !cfg!(feature = "cuda") => Err(
            "training.device: cuda, but this rulka was built without the `cuda` feature \
             (cargo build --release -p rulka --features cuda links libtorch_cuda.so)"
                .into(),
        ),
        LearnerDevice::Cuda => Err(format!(
            "training.device: cuda, but libtorch_cuda.so sees no GPU (CUDA devices: {}; \
             is the NVIDIA driver loaded, and does LD_LIBRARY_PATH lead to a CUDA build of libtorch?)",
            tch::Cuda::device_count()
        )),
    }
}

/// `cuda:0` or `cpu`, for messages.
pub fn device_name(d: Device) -> String {
    match d {
        Device::Cuda(i) => format!("cuda:{i}"),
        _ => "cpu".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cpu` is always the CPU; `cuda` that cannot be had names what is
    /// missing: the feature in a build without it, the GPU in one with it.
    #[test]
    fn a_cuda_learner_that_cannot_be_had_is_refused_naming_why() {
        assert_eq!(learner_device(LearnerDevice::Cpu), Ok(Device::Cpu));
        if tch::Cuda::is_available() {
            assert_eq!(learner_device(LearnerDevice::Auto), Ok(Device::Cuda(0)));
            return;
        }
        assert_eq!(learner_device(LearnerDevice::Auto), Ok(Device::Cpu));
        let e = learner_device(LearnerDevice::Cuda).expect_err("no GPU here");
        assert!(e.starts_with("training.device: cuda"), "{e}");
        if cfg!(feature = "cuda") {
            assert!(e.contains("sees no GPU") && e.contains("libtorch_cuda.so"), "{e}");
        } else {
            assert!(e.contains("without the `cuda` feature"), "{e}");
        }
        assert_eq!(device_name(Device::Cuda(1)), "cuda:1");
        assert_eq!(device_name(Device::Cpu), "cpu");
    }

    /// 3 collectors of 2 threads hold 6 threads; a thread count of 0 counts as 1.
    #[test]
    fn the_collectors_threads_are_their_count_times_their_sessions_threads() {
        let mut cfg = Config::default();
        cfg.collectors.count = 3;
        cfg.inference.intra_op_threads = 2;
        assert_eq!(collector_threads(&cfg), 6);
        cfg.inference.intra_op_threads = 0;
        assert_eq!(collector_threads(&cfg), 3);
    }
}
