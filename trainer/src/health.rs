//! What the trainer knows of its collectors' health beyond the
//! trajectories: the games they launch (`environment.tmi.launch`), the
//! remote collectors over NATS (connected, delivering, rejoined), and the
//! broker — for the progress line, TensorBoard (`Games/*`, `Transport/*`)
//! and `summary.json`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rulka_config::Config;
use rulka_learner::EventWriter;

use crate::supervisor::Supervisor;
use crate::transport::Broker;
use rulka_run::RunInfo;

/// The games' and the NATS link's health as TensorBoard scalars (`Games/*`
/// when collectors launch games, `Transport/*` over NATS): every 30 s and
/// once more at the stop, so the last values are the run's totals.
pub(crate) fn health_scalars(
    tb: &mut EventWriter,
    step: i64,
    cfg: &Config,
    games: &Games,
    broker: Option<&Broker>,
    remote: &mut RemoteView,
) -> anyhow::Result<()> {
    let (up, n_games, g) = games.totals();
    if n_games > 0 {
        tb.scalar("Games/up", step, up as f64)?;
        tb.scalar("Games/launches", step, g.launches as f64)?;
        tb.scalar("Games/hangs", step, g.hangs as f64)?;
        tb.scalar("Games/crashes", step, g.crashes as f64)?;
        tb.scalar("Games/desyncs", step, g.desyncs as f64)?;
        tb.scalar("Games/scheduled_restarts", step, g.scheduled_restarts as f64)?;
    }
    if let Some(b) = broker {
        remote.hear(cfg, Some(b));
        let connected = b.collectors().iter().filter(|(_, age)| *age < CONNECTED_WITHIN).count();
        tb.scalar("Transport/broker_restarts", step, b.restarts() as f64)?;
        tb.scalar("Transport/broker_connected", step, f64::from(u8::from(b.status().connected)))?;
        tb.scalar("Transport/broker_connection_drops", step, b.status().drops as f64)?;
        tb.scalar("Transport/collectors_connected", step, connected as f64)?;
        tb.scalar("Transport/remote_rejoins", step, remote.rejoins() as f64)?;
    }
    Ok(())
}

/// The collectors' games (`environment.tmi.launch`), as they report them:
/// the trainer's own collectors in `logs/collector<id>.game.json`, the
/// others in their `alive.<id>` records. Counts add up over incarnations.
#[derive(Debug, Default)]
pub(crate) struct Games {
    per: std::collections::BTreeMap<(u32, u32), rulka_config::GameCounters>,
}

impl Games {
    /// None yet: the game reports an earlier trainer's collectors left in
    /// `run_dir` are not this run's, and are removed.
    pub(crate) fn new(run_dir: &Path, cfg: &Config) -> Self {
        for id in 0..cfg.collectors.count {
            let _ = std::fs::remove_file(Self::report(run_dir, id));
        }
        Self::default()
    }

    /// Where local collector `id` reports its game (beside its heartbeat).
    fn report(run_dir: &Path, id: u32) -> PathBuf {
        RunInfo::heartbeat_path(run_dir, id).with_extension("game.json")
    }

    pub(crate) fn refresh(&mut self, run_dir: &Path, cfg: &Config, broker: Option<&Broker>) {
        for id in 0..cfg.collectors.count {
            if let Some(g) = std::fs::read_to_string(Self::report(run_dir, id))
                .ok()
                .and_then(|t| serde_json::from_str::<rulka_config::GameCounters>(&t).ok())
            {
                self.per.insert((id, g.incarnation), g);
            }
        }
        for (a, _) in broker.map(Broker::collectors).unwrap_or_default() {
            if let Some(g) = a.game {
                self.per.insert((a.id, a.incarnation), g);
            }
        }
    }

    /// Sums over every collector incarnation; `up` is a count of collectors.
    pub(crate) fn totals(&self) -> (u64, u64, rulka_config::GameCounters) {
        let mut t = rulka_config::GameCounters::default();
        let mut latest: std::collections::BTreeMap<u32, bool> = std::collections::BTreeMap::new();
        for (&(id, _), g) in &self.per {
            t.launches += g.launches;
            t.hangs += g.hangs;
            t.crashes += g.crashes;
            t.desyncs += g.desyncs;
            t.scheduled_restarts += g.scheduled_restarts;
            t.failed_launches += g.failed_launches;
            latest.insert(id, g.up);
        }
        let up = latest.values().filter(|&&u| u).count() as u64;
        (up, latest.len() as u64, t)
    }

    /// ` | games U/N` once a collector reports a game.
    pub(crate) fn line(&self) -> String {
        let (up, n, t) = self.totals();
        if n == 0 {
            return String::new();
        }
        let mut s = format!(" | games {up}/{n}");
        let trouble = t.hangs + t.crashes + t.desyncs + t.failed_launches;
        if trouble > 0 || t.scheduled_restarts > 0 {
            s.push_str(&format!(
                " ({} launches: {} hung, {} crashed, {} desynced, {} failed to start, {} scheduled)",
                t.launches, t.hangs, t.crashes, t.desyncs, t.failed_launches, t.scheduled_restarts
            ));
        }
        s
    }
}

/// What the trainer knows of each collector from what it delivers: its
/// incarnations (a new one is a restart, or a remote collector rejoining)
/// and when its last trajectory came.
#[derive(Debug, Default)]
pub(crate) struct RemoteView {
    seen: std::collections::BTreeMap<u32, Delivered>,
    /// Ids below this are the trainer's own (local) collectors.
    local: u32,
}

#[derive(Debug)]
struct Delivered {
    incarnation: u32,
    rejoins: u64,
    trajectories: u64,
    last: Instant,
}

/// A collector delivering within this long counts as delivering.
const DELIVERING_WITHIN: Duration = Duration::from_secs(30);
/// A collector heard from (`alive.<id>`) within this long counts as connected.
const CONNECTED_WITHIN: Duration = Duration::from_secs(15);

impl RemoteView {
    /// Ids below `local` are the trainer's own collectors.
    pub(crate) fn new(local: u32) -> Self {
        Self { local, ..Self::default() }
    }

    pub(crate) fn delivered(&mut self, id: u32, incarnation: u32) {
        self.note(id, incarnation, true);
    }

    fn note(&mut self, id: u32, incarnation: u32, trajectory: bool) {
        let d = self.seen.entry(id).or_insert(Delivered {
            incarnation,
            rejoins: 0,
            trajectories: 0,
            last: Instant::now() - DELIVERING_WITHIN * 2,
        });
        if incarnation > d.incarnation {
            d.incarnation = incarnation;
            d.rejoins += 1;
        }
        if trajectory {
            d.trajectories += 1;
            d.last = Instant::now();
        }
    }

    /// New incarnations of collectors the trainer does not start itself
    /// (ids from `collectors.count` on: remote collectors).
    pub(crate) fn rejoins(&self) -> u64 {
        self.remote_ids().map(|(_, d)| d.rejoins).sum()
    }

    fn remote_ids(&self) -> impl Iterator<Item = (&u32, &Delivered)> {
        self.seen.iter().filter(|(&id, _)| id >= self.local)
    }

    /// Takes in what the collectors say of themselves.
    pub(crate) fn hear(&mut self, cfg: &Config, broker: Option<&Broker>) {
        self.local = cfg.collectors.count;
        for (a, age) in broker.map(Broker::collectors).unwrap_or_default() {
            if age < CONNECTED_WITHIN {
                self.note(a.id, a.incarnation, false);
            }
        }
    }

    /// Per collector, for summary.json.
    pub(crate) fn summary(
        &mut self,
        cfg: &Config,
        broker: Option<&Broker>,
    ) -> Vec<serde_json::Value> {
        self.hear(cfg, broker);
        let heard: HashMap<u32, (rulka_transport::CollectorAlive, Duration)> = broker
            .map(Broker::collectors)
            .unwrap_or_default()
            .into_iter()
            .map(|(a, age)| (a.id, (a, age)))
            .collect();
        let mut ids: Vec<u32> = self.seen.keys().chain(heard.keys()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .map(|id| {
                let d = self.seen.get(&id);
                let h = heard.get(&id);
                serde_json::json!({
                    "id": id,
                    "local": id < cfg.collectors.count,
                    "host": h.map(|(a, _)| a.host.clone()),
                    "incarnation": d.map(|d| d.incarnation).or(h.map(|(a, _)| a.incarnation)),
                    "rejoins": d.map_or(0, |d| d.rejoins),
                    "trajectories": d.map_or(0, |d| d.trajectories),
                    "last_trajectory_s_ago": d.filter(|d| d.trajectories > 0).map(|d| d.last.elapsed().as_secs_f64()),
                    "last_heard_s_ago": h.map(|(_, age)| age.as_secs_f64()),
                    "connected": h.is_some_and(|(_, age)| *age < CONNECTED_WITHIN),
                    "outbox_chunks": h.map(|(a, _)| a.queued),
                    "outbox_dropped_trajectories": h.map(|(a, _)| a.outbox_dropped),
                    "weights": h.and_then(|(a, _)| a.weights),
                })
            })
            .collect()
    }
}

/// The progress line's collectors part: local processes alive; with NATS,
/// the other collectors too (connected, delivering, rejoined), and the
/// server's state when it is not plain.
pub(crate) fn collectors_part(
    sup: &Supervisor,
    cfg: &Config,
    broker: Option<&Broker>,
    remote: &mut RemoteView,
) -> String {
    let local = format!("collectors {}/{}", sup.alive(), cfg.collectors.count);
    let Some(b) = broker else { return local };
    remote.hear(cfg, Some(b));
    let heard = b.collectors();
    let remote_ids: Vec<u32> = remote.remote_ids().map(|(&id, _)| id).collect();
    let mut out = local;
    if !remote_ids.is_empty() {
        let connected = heard
            .iter()
            .filter(|(a, age)| a.id >= cfg.collectors.count && *age < CONNECTED_WITHIN)
            .count();
        let delivering =
            remote.remote_ids().filter(|(_, d)| d.last.elapsed() < DELIVERING_WITHIN).count();
        out.push_str(&format!(
            " + remote {connected}/{} connected, {delivering} delivering",
            remote_ids.len()
        ));
        if remote.rejoins() > 0 {
            out.push_str(&format!(", {} rejoined", remote.rejoins()));
        }
    }
    let st = b.status();
    if !st.connected {
        out.push_str(&format!(" | broker unreachable {:.0} s", st.for_time.as_secs_f64()));
    }
    if b.restarts() > 0 {
        out.push_str(&format!(" | broker restarts {}", b.restarts()));
    }
    out
}
