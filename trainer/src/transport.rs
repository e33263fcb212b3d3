//! The run's transport, set up from `transport:` in the config.
//!
//! - `shm` (default): a fresh shared-memory directory per trainer incarnation
//!   (a killed predecessor's is removed), one ring per local collector slot,
//!   the weight board.
//! - `nats`: the run's stream, consumer, key-value bucket and object store on
//!   `transport.nats.url` — or, without a URL, on a local `nats-server` child
//!   the trainer starts (store in `RUN_DIR/nats/`, so a resumed run gets the
//!   chunks it had not taken; users `trainer` and `collector` with fresh
//!   passwords, the collector one limited to publishing this run's
//!   trajectories). The game's map files go into the run's object store, so
//!   collectors on game PCs need nothing but the game. The local server is
//!   the trainer's to look after ([`Broker`]): in a process group of its own
//!   (a terminal's Ctrl-C reaches the trainer only, which stops it last),
//!   never outliving a SIGKILLed trainer, restarted on the same port and
//!   store when it dies. Weight snapshots are published on a thread of
//!   their own ([`crate::publisher`]): the learner never waits on the network.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use rulka_config::{Config, EnvKind, TransportKind};
use rulka_shm::ChunkLayout;
use rulka_transport::{
    schema_hash, CollectorAlive, LocalNatsServer, NatsLink, NatsLinkStatus, NatsOptions,
    NatsServerEvent, NatsServerSpec, NatsTrainer, NatsUsers, RemoteCollectors, RolloutSource,
    RunRecord, ShmRollouts, ShmWeightSink, StreamLimits, WeightSink,
};

use crate::BadInput;
use rulka_run::{nats_options, shm_root, NatsInfo, RunDir, RunInfo};

/// The trainer's ends of the transport, and what collectors need to find it.
pub struct Endpoints {
    /// Where trajectories come from.
    pub rollouts: Box<dyn RolloutSource>,
    /// Where weight snapshots go.
    pub weights: Box<dyn WeightSink>,
    /// What `RUN_DIR/run.json` says.
    pub info: RunInfo,
    /// One line for the start banner.
    pub description: String,
    /// Whether a failed weight publish stops training (shared memory: yes;
    /// NATS: no — publishes go through a [`crate::publisher::BackgroundPublisher`]).
    pub publish_errors_fatal: bool,
    /// The NATS server and what goes on there (NATS only).
    pub broker: Option<Broker>,
    cleanup: Cleanup,
}

/// The trainer's NATS server, looked after: its connection's state, the
/// local server's restarts, the run's collectors as they report themselves.
pub struct Broker {
    link: NatsLink,
    server: Option<Box<LocalNatsServer>>,
    remote: RemoteCollectors,
    publisher: crate::publisher::StatsHandle,
    /// The trainer's incarnation on the run.
    pub epoch: u64,
    /// The server's URL as collectors reach it.
    pub url: String,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Broker {
    /// Watches the local server (if the trainer runs one): a dead one is
    /// reaped and restarted on the same port and store, with back-off.
    /// Returns what happened, as lines to print.
    pub fn tick(&mut self) -> Vec<String> {
        let Some(server) = self.server.as_mut() else { return Vec::new() };
        let mut said = Vec::new();
        while let Some(ev) = server.supervise() {
            said.push(match ev {
                NatsServerEvent::Died { pid, status, restart_in } => format!(
                    "nats-server (pid {pid}) died ({status}); restarting it on port {} with the same store in {:.1} s",
                    server.port(),
                    restart_in.as_secs_f64()
                ),
                NatsServerEvent::Restarted { pid, down_for } => format!(
                    "nats-server restarted (pid {pid}) on port {} after {:.1} s down; collectors reconnect by themselves",
                    server.port(),
                    down_for.as_secs_f64()
                ),
                NatsServerEvent::RestartFailed { reason, retry_in } => format!(
                    "restarting nats-server failed: {reason}; next try in {:.0} s",
                    retry_in.as_secs_f64()
                ),
            });
            if said.len() > 4 {
                break;
            }
        }
        said
    }

    /// Restarts of the local server so far.
    pub fn restarts(&self) -> u64 {
        self.server.as_ref().map_or(0, |s| s.restarts())
    }

    /// The trainer's connection to the server.
    pub fn status(&self) -> NatsLinkStatus {
        self.link.status()
    }

    /// Where the connection's news goes (lost, back, still unreachable).
    pub fn set_reporter(&self, f: impl Fn(&str) + Send + 'static) {
        self.link.set_reporter(f);
    }

    /// The collectors heard from (`alive.<id>` records) and how long ago.
    pub fn collectors(&self) -> Vec<(CollectorAlive, Duration)> {
        self.remote.heard()
    }

    /// The weight publisher's counters so far.
    pub fn publisher_stats(&self) -> crate::publisher::PublishStats {
        self.publisher.stats()
    }
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints").field("description", &self.description).finish_non_exhaustive()
    }
}

enum Cleanup {
    Shm { dir: PathBuf },
    Nats,
}

impl Endpoints {
    /// Releases the transport: shared memory is removed; the weight
    /// publisher gets up to 2 s to finish, then a local NATS server is
    /// stopped, last (SIGTERM; its store stays in the run directory).
    pub fn close(self) {
        let Endpoints { rollouts, weights, cleanup, broker, .. } = self;
        drop(rollouts);
        drop(weights);
        match cleanup {
            Cleanup::Shm { dir } => {
                let _ = std::fs::remove_dir_all(dir);
            }
            Cleanup::Nats => {}
        }
        if let Some(mut b) = broker {
            if let Some(mut s) = b.server.take() {
                // Stopping it is no news.
                b.link.set_reporter(|_| {});
                s.stop(Duration::from_secs(3));
            }
        }
    }
}

/// The run's name on a NATS server: `transport.nats.run`, else the run
/// directory's name with other characters replaced by `_`.
pub fn nats_run_name(cfg: &Config, run_dir: &Path) -> String {
    cfg.transport.nats.run.clone().unwrap_or_else(|| {
        let base = run_dir
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "run".into());
        let mut s: String = base
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        s.truncate(64);
        if s.is_empty() {
            "run".into()
        } else {
            s
        }
    })
}

/// SIGKILLs process `pid` if it is a `nats-server` running on the store in
/// `dir` (its command line names the config file there), and waits until it is gone.
fn stop_orphan_server(pid: u32, dir: &Path) {
    let conf = dir.join("nats-server.conf");
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return };
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    if !(cmdline.contains("nats-server") && cmdline.contains(&*conf.to_string_lossy())) {
        return;
    }
    tracing::info!("[rulka train] stopping the previous trainer's nats-server (pid {pid})");
    rulka_shm::send_signal(pid, rulka_shm::SIGKILL);
    let t0 = std::time::Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && t0.elapsed() < Duration::from_secs(5) {
        // A zombie (reaped by init) still has a /proc entry; its state says so.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.contains(") Z") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The local server's users: those of `dir/users.json` (a resumed run keeps
/// its passwords, so remote collectors reconnect), else new ones, saved
/// there readable by the owner only.
fn local_users(dir: &Path) -> anyhow::Result<NatsUsers> {
    let path = dir.join("users.json");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if let (Some(t), Some(c)) = (v["trainer"].as_str(), v["collector"].as_str()) {
            return Ok(NatsUsers { trainer: t.into(), collector: c.into() });
        }
    }
    let users = NatsUsers::random();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let text =
        serde_json::json!({"trainer": users.trainer, "collector": users.collector}).to_string();
    rulka_checkpoint::write_atomic(&path, text.as_bytes())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(users)
}

/// Chunks one collector may have in the stream: its `collectors.ring_chunks`
/// (as its shared-memory ring would hold) plus the longest possible
/// trajectory, so that a whole trajectory always fits — its chunks are
/// acknowledged only once the trainer has all of them.
pub fn max_chunks_per_collector(cfg: &Config, layout: ChunkLayout) -> i64 {
    let decision_ms = u64::from(cfg.ms_per_action().max(1));
    let limit = u64::from(cfg.environment.cutoff_rollout_if_race_not_finished_within_duration_ms);
    let steps = limit / decision_ms + 2;
    let chunks = steps.div_ceil(layout.max_steps.max(1) as u64);
    (u64::from(cfg.collectors.ring_chunks) + chunks + 1) as i64
}

/// Sets up the transport of the run in `run_dir` for `cfg` (chunks of `layout`).
/// A run that is not resumed (`fresh`) starts from an empty NATS stream.
pub fn open(
    cfg: &Config,
    run_dir: &Path,
    layout: ChunkLayout,
    fresh: bool,
) -> anyhow::Result<Endpoints> {
    rulka_run::remove_stale_shm();
    match cfg.transport.kind {
        TransportKind::Shm => open_shm(cfg, run_dir),
        TransportKind::Nats => open_nats(cfg, run_dir, layout, fresh),
    }
}

fn open_shm(cfg: &Config, run_dir: &Path) -> anyhow::Result<Endpoints> {
    // A killed predecessor's shared memory is removed (any dead run's, by owner liveness).
    if let Ok(old) = RunInfo::read(run_dir) {
        if old.shm_dir.starts_with(shm_root()) && old.shm_dir.exists() {
            let _ = std::fs::remove_dir_all(&old.shm_dir);
            tracing::info!(
                "[rulka train] removed stale shared memory of a previous trainer: {}",
                old.shm_dir.display()
            );
        }
    }
    let run_id =
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32);
    let info = RunInfo {
        run_id,
        shm_dir: shm_root().join(format!("rulka-{run_id:016x}")),
        trainer_pid: std::process::id(),
        nats: None,
        collectors: Some(cfg.collectors.count),
    };
    std::fs::create_dir_all(&info.shm_dir)
        .with_context(|| format!("creating {}", info.shm_dir.display()))?;
    rulka_shm::write_owner(&info.shm_dir, run_dir)
        .context("writing the shared memory's owner record")?;
    let layout = info.layout(cfg);
    let rings = (0..cfg.collectors.count)
        .map(|i| rulka_shm::RingConsumer::create(&layout.ring(i)))
        .collect::<Result<Vec<_>, _>>()
        .context("creating the collectors' rings")?;
    let board =
        rulka_shm::BoardWriter::create(&layout.board()).context("creating the weight board")?;
    Ok(Endpoints {
        rollouts: Box::new(ShmRollouts::new(rings, layout.chunk)),
        weights: Box::new(ShmWeightSink::new(board)),
        description: "shared memory".into(),
        publish_errors_fatal: true,
        broker: None,
        cleanup: Cleanup::Shm { dir: info.shm_dir.clone() },
        info,
    })
}

fn open_nats(
    cfg: &Config,
    run_dir: &Path,
    layout: ChunkLayout,
    fresh: bool,
) -> anyhow::Result<Endpoints> {
    let run = nats_run_name(cfg, run_dir);
    let (server, trainer_opts, collector) = match &cfg.transport.nats.url {
        Some(url) => {
            let o = nats_options(cfg, url, "rulka-trainer");
            let c = NatsInfo {
                url: url.clone(),
                run: run.clone(),
                user: o.user.clone(),
                password: o.password.clone(),
                server_pid: None,
            };
            (None, o, c)
        }
        None => {
            let (server, o, c) = start_local_server(cfg, run_dir, &run)?;
            (Some(server), o, c)
        }
    };
    let (trainer, limits) = open_run(cfg, &trainer_opts, &run, layout, fresh)?;
    upload_maps(cfg, &trainer)?;
    let rollouts = trainer.rollouts(layout, limits)?;
    let publisher = crate::publisher::BackgroundPublisher::new(
        Box::new(trainer.weights(&cfg.network_hash())),
        |m| tracing::info!("\n[rulka train] {m}"),
    );
    let description = format!(
        "NATS {} (run {run}, trainer epoch {}{})",
        collector.url,
        trainer.epoch(),
        if server.is_some() { ", local server" } else { "" }
    );
    let broker = Broker {
        link: trainer.link().clone(),
        server: server.map(Box::new),
        remote: trainer.remote_collectors(),
        publisher: publisher.stats_handle(),
        epoch: trainer.epoch(),
        url: collector.url.clone(),
    };
    Ok(Endpoints {
        rollouts: Box::new(rollouts),
        weights: Box::new(publisher),
        info: RunInfo {
            run_id: 0,
            shm_dir: PathBuf::new(),
            trainer_pid: std::process::id(),
            nats: Some(collector),
            collectors: Some(cfg.collectors.count),
        },
        description,
        publish_errors_fatal: false,
        broker: Some(broker),
        cleanup: Cleanup::Nats,
    })
}

/// Starts the run's local `nats-server` (store in `RUN_DIR/nats/`, users
/// `trainer` and `collector`): the trainer's options and what collectors need.
/// A SIGKILLed predecessor's server outlived it: it is stopped (its store
/// is ours) and its port kept, so remote collectors find the run again.
fn start_local_server(
    cfg: &Config,
    run_dir: &Path,
    run: &str,
) -> anyhow::Result<(LocalNatsServer, NatsOptions, NatsInfo)> {
    let n = &cfg.transport.nats;
    let mut port = n.port;
    if let Ok(RunInfo { nats: Some(old), .. }) = RunInfo::read(run_dir) {
        if let Some(pid) = old.server_pid {
            stop_orphan_server(pid, &RunDir::new(run_dir).nats());
        }
        let old_port = old.url.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        if port == 0 {
            port = old_port
                .filter(|&p| std::net::TcpListener::bind((n.listen.as_str(), p)).is_ok())
                .unwrap_or(0);
        }
    }
    let users = local_users(&RunDir::new(run_dir).nats())?;
    let server = LocalNatsServer::start(NatsServerSpec {
        dir: RunDir::new(run_dir).nats(),
        host: n.listen.clone(),
        port,
        users: Some(users.clone()),
        runs: vec![run.to_string()],
        tls: None,
        extra: String::new(),
        tied_to_parent: true,
    })
    .map_err(|e| anyhow::anyhow!("starting a local nats-server: {e}"))?;
    let host = if n.listen == "0.0.0.0" { "127.0.0.1" } else { n.listen.as_str() };
    let url = format!("nats://{host}:{}", server.port());
    let mut o = server.trainer_options("rulka-trainer");
    o.url = url.clone();
    let c = NatsInfo {
        url,
        run: run.to_string(),
        user: Some("collector".into()),
        password: Some(users.collector),
        server_pid: server.pid(),
    };
    Ok((server, o, c))
}

/// Connects and opens (or creates) the run on the server: a chunk that
/// could not fit the server's `max_payload` is refused as bad input.
fn open_run(
    cfg: &Config,
    opts: &NatsOptions,
    run: &str,
    layout: ChunkLayout,
    fresh: bool,
) -> anyhow::Result<(NatsTrainer, StreamLimits)> {
    let link = NatsLink::connect(opts)?;
    let max = link.max_payload();
    if layout.max_record() + 1024 > max {
        return Err(BadInput(format!(
            "collectors.chunk_steps {}: a chunk is up to {} bytes, over the NATS server's max_payload {max}; lower collectors.chunk_steps",
            layout.max_steps,
            layout.max_record()
        ))
        .into());
    }
    let record = RunRecord {
        run: run.to_string(),
        schema_hash: schema_hash(&layout),
        network_hash: cfg.network_hash(),
        config_yaml: cfg.to_yaml(),
        rulka_version: env!("CARGO_PKG_VERSION").into(),
    };
    let n = &cfg.transport.nats;
    let limits = StreamLimits {
        max_bytes: i64::from(n.stream_max_mib) << 20,
        max_per_collector: max_chunks_per_collector(cfg, layout),
        ack_wait: Duration::from_secs(u64::from(n.ack_wait_s)),
    };
    let trainer = NatsTrainer::open(link, &record, limits, fresh)?;
    Ok((trainer, limits))
}

/// The game's map files into the run's object store (game runs), so
/// collectors on game PCs need nothing but the game.
fn upload_maps(cfg: &Config, trainer: &NatsTrainer) -> anyhow::Result<()> {
    if cfg.environment.kind != EnvKind::Tmi {
        return Ok(());
    }
    for m in &cfg.environment.tmi.maps {
        for (suffix, path) in
            [("", Some(&m.zone_centers)), ("-checkpoints", m.checkpoints.as_ref())]
        {
            let Some(path) = path else { continue };
            let bytes = std::fs::read(path)
                .map_err(|e| BadInput(format!("map {}: {}: {e}", m.name, path.display())))?;
            trainer.put_object(&format!("map-{}{suffix}.npy", m.name), &bytes)?;
        }
    }
    Ok(())
}
