//! The NATS JetStream transport, for collectors on other machines.
//!
//! Per run `R` (a name of `[A-Za-z0-9_-]`):
//!
//! - **Trajectories**: stream `RULKA_TRAJ_R` on subjects `rulka.R.traj.<collector>`,
//!   file storage, work-queue retention, capped at `stream_max_bytes` with
//!   `discard: new` — a full stream refuses chunks, which is back-pressure on
//!   the collectors (they wait, or drop and count, per `collectors.backpressure`).
//!   Every chunk (the [`rulka_shm::chunk`] record, little-endian) carries the
//!   message id `R.<collector>.<incarnation>.<trajectory>.<chunk>` (the server
//!   stores a resent chunk once), and headers with the policy version, a
//!   per-incarnation sequence number, the record-schema hash and the byte
//!   order. The trainer pulls with a durable consumer (`trainer`) and
//!   explicit acks: a trajectory's chunks are acknowledged (and the server
//!   confirms it) only when the whole trajectory is taken, so a restarted
//!   trainer receives whatever it had not taken again; repeats are ignored.
//! - **Weights**: each snapshot into the object store `RULKA_W_R` as
//!   `weights-v<version>` (the newest 3 kept), then the key `latest` of the
//!   key-value bucket `RULKA_R` (version, object name, SHA-256, size), which
//!   collectors watch; they fetch only the newest snapshot when ready, check
//!   its SHA-256, never go backwards, and keep their weights when a fetch fails.
//! - **The run record**: key `run` of `RULKA_R` — the config (YAML), the
//!   record-schema and network hashes, rulka's version; a collector joining
//!   checks them against its own and refuses to run on a mismatch. Key
//!   `incarnation.<id>` counts a collector slot's starts (compare-and-set),
//!   so trajectory ids stay unique across restarts on any machine. The maps'
//!   zone-centre files travel in the object store too (`map-<name>.npy`).
//!
//! - **Trainer incarnations**: key `trainer_epoch` counts the trainer's
//!   starts on the run; every `latest` record carries it, so collectors take
//!   a resumed trainer's weights even though their versions are lower than
//!   those of the trainer that crashed.
//! - **Collectors alive**: each collector puts `alive.<id>` (its
//!   incarnation, host, pid, chunks delivered and held, weights) every
//!   [`ALIVE_EVERY`]; the trainer reads them ([`RemoteCollectors`]).
//!
//! Nothing waits without a deadline: every call on a [`Link`] ends within
//! its own ([`API_DEADLINE`], [`CHUNK_DEADLINE`], [`transfer_deadline`]) with
//! [`TransportError::Timeout`], and callers that must not wait skip calls
//! while the connection is down ([`TransportError::Unreachable`]).
//! Connections reconnect by themselves, and say so once each way.
//! A collector whose server is out of reach keeps its chunks in a bounded
//! outbox and delivers them in order when it is back, with the same message
//! ids, so a dropped network or a restarted server loses and duplicates
//! nothing; a full outbox drops its oldest whole trajectories, counted.
//! Authentication: a token, or a user and password (the local server
//! [`crate::server`] gives collectors a user that may publish only its run's
//! trajectory subjects and its own records); TLS with a CA and client
//! certificates.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, kv, object_store, stream};
use async_nats::{ConnectErrorKind, HeaderMap};
use bytes::Bytes;
use futures::StreamExt;
use rulka_shm::chunk::{
    encode_chunk, read_chunk, ChunkHeader, ChunkLayout, Steps, Trajectory, TrajectoryId,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::runtime::Runtime;

use crate::{
    ChunkSink, RolloutSource, Sent, SinkStats, SourceStats, TransportError, WeightSink,
    WeightSource,
};

/// Header: the policy version that produced the chunk.
pub const H_POLICY_VERSION: &str = "Rulka-Policy-Version";
/// Header: the sender incarnation's chunk sequence number (from 0).
pub const H_SEQ: &str = "Rulka-Seq";
/// Header: the record-schema hash.
pub const H_SCHEMA: &str = "Rulka-Schema";
/// Header: the payload's byte order (`le`).
pub const H_BYTE_ORDER: &str = "Rulka-Byte-Order";
/// Weight snapshots kept in the object store.
pub const WEIGHT_VERSIONS_KEPT: usize = 3;

/// TLS settings of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsOptions {
    /// CA certificate (PEM) that signed the server's certificate.
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM), when the server verifies clients.
    pub cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    pub key: Option<PathBuf>,
}

/// How to reach a NATS server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsOptions {
    /// `nats://host:port` (or `tls://…`).
    pub url: String,
    /// Token authentication.
    pub token: Option<String>,
    /// User authentication: name.
    pub user: Option<String>,
    /// User authentication: password.
    pub password: Option<String>,
    /// TLS (required when set).
    pub tls: Option<TlsOptions>,
    /// Connection name shown by the server.
    pub name: String,
}

/// The NATS names of run `run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunNames {
    /// The run.
    pub run: String,
    /// Trajectory stream.
    pub stream: String,
    /// Key-value bucket (run record, latest weights, incarnations).
    pub kv: String,
    /// Object store (weights, maps).
    pub objects: String,
}

impl RunNames {
    /// The names of run `run`; a run name other than `[A-Za-z0-9_-]{1,64}` is an error.
    pub fn new(run: &str) -> Result<Self, TransportError> {
        let ok = !run.is_empty()
            && run.len() <= 64
            && run.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok {
            return Err(TransportError::Invalid(format!(
                "run name {run:?}: use 1 to 64 of A-Z a-z 0-9 - _"
            )));
        }
        Ok(Self {
            run: run.to_string(),
            stream: format!("RULKA_TRAJ_{run}"),
            kv: format!("RULKA_{run}"),
            objects: format!("RULKA_W_{run}"),
        })
    }

    /// The subject collector `id` publishes its chunks on.
    pub fn subject(&self, id: u32) -> String {
        format!("rulka.{}.traj.{id}", self.run)
    }

    /// All of the run's trajectory subjects.
    pub fn subjects(&self) -> String {
        format!("rulka.{}.traj.>", self.run)
    }
}

/// Key of the trainer's incarnation counter.
const EPOCH_KEY: &str = "trainer_epoch";

/// What the trainer publishes about its run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's name.
    pub run: String,
    /// The record schema's hash (chunk layout).
    pub schema_hash: String,
    /// The network's hash (`Config::network_hash`).
    pub network_hash: String,
    /// The run's config, as YAML.
    pub config_yaml: String,
    /// rulka's version on the trainer.
    pub rulka_version: String,
}

/// The `latest` weights record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latest {
    /// Snapshot version (learner updates).
    pub version: u64,
    /// Object name in the run's object store.
    pub name: String,
    /// Hex SHA-256 of the snapshot's bytes.
    pub sha256: String,
    /// Bytes.
    pub size: usize,
    /// Network hash of the weights.
    pub network_hash: String,
    /// The trainer's incarnation on this run (0 for the first start; a
    /// resumed trainer counts up): newer epochs win over higher versions.
    #[serde(default)]
    pub epoch: u64,
}

impl Latest {
    /// Whether this record announces weights a collector holding
    /// `(epoch, version)` should take: a later trainer incarnation, or a
    /// higher version of the same one.
    pub fn supersedes(&self, held: Option<(u64, u64)>) -> bool {
        held.is_none_or(|(e, v)| self.epoch > e || (self.epoch == e && self.version > v))
    }
}

/// What a collector says about itself every [`ALIVE_EVERY`] (key `alive.<id>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alive {
    /// The collector slot.
    pub id: u32,
    /// Its incarnation (starts of the slot).
    pub incarnation: u32,
    /// The machine's host name.
    pub host: String,
    /// The process id there.
    pub pid: u32,
    /// Chunks the server stored.
    pub chunks: u64,
    /// Chunks held in the outbox (server out of reach).
    pub queued: u64,
    /// Trajectories dropped from a full outbox.
    pub outbox_dropped: u64,
    /// The weights it drives with: `(trainer epoch, version)`.
    pub weights: Option<(u64, u64)>,
    /// Its game, when it drives one.
    #[serde(default)]
    pub game: Option<rulka_config::GameCounters>,
}

/// Hex SHA-256 (first 16 hex digits) of a chunk layout: both ends must agree.
pub fn schema_hash(layout: &ChunkLayout) -> String {
    let s = format!("{:?}", layout.schema());
    hex::encode(&Sha256::digest(s.as_bytes())[..8])
}

fn nats_err(op: &str, e: impl std::fmt::Display) -> TransportError {
    TransportError::Nats { op: op.to_string(), message: e.to_string() }
}

/// Deadline of a JetStream API request (stream and consumer info, key-value
/// reads and writes, acks confirmed by the server).
pub const API_DEADLINE: Duration = Duration::from_secs(5);
/// What a trainer's pull may take beyond its own expiry, and the base of
/// the deadline of confirming acks: short, so that the trainer's loop goes
/// round (limits, signals) even while a server hangs.
pub const POLL_SLACK: Duration = Duration::from_secs(2);
/// Deadline of one chunk's publish and its acknowledgement.
pub const CHUNK_DEADLINE: Duration = Duration::from_secs(3);
/// How often a collector says it is alive (key `alive.<id>`).
pub const ALIVE_EVERY: Duration = Duration::from_secs(3);
/// How often a lasting outage is mentioned again.
pub const UNREACHABLE_REMINDER: Duration = Duration::from_secs(30);

/// The deadline of moving `bytes` (an object put or get): 15 s plus 2 s a
/// megabyte (a 20 Mbit/s link moves a megabyte in 0.4 s).
pub fn transfer_deadline(bytes: usize) -> Duration {
    Duration::from_secs(15) + Duration::from_millis(2 * (bytes as u64 >> 10))
}

/// Whether a JetStream lookup failed because the stream (bucket, object
/// store) does not exist — not because the server did not answer.
fn is_not_found(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(g) = err.downcast_ref::<jetstream::context::GetStreamError>() {
            if let jetstream::context::GetStreamErrorKind::JetStream(j) = g.kind() {
                return j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND;
            }
            return false;
        }
        cur = err.source();
    }
    false
}

/// What the connection is doing, kept up to date by the client's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    /// Connected now.
    pub connected: bool,
    /// How long it has been in this state.
    pub for_time: Duration,
    /// Connections lost so far.
    pub drops: u64,
    /// Connections re-established so far.
    pub reconnects: u64,
}

#[derive(Debug)]
struct Health {
    connected: bool,
    since: Instant,
    drops: u64,
    reconnects: u64,
    /// When a lasting outage was last mentioned.
    said: Instant,
}

type Reporter = Arc<std::sync::Mutex<Box<dyn Fn(&str) + Send>>>;

fn say(r: &Reporter, msg: &str) {
    if let Ok(f) = r.lock() {
        f(msg);
    }
}

/// A connection: a client and a JetStream context on a runtime of their own
/// (one worker thread: pings, reconnects and acks go on between calls).
/// Every call waits at most its deadline; a lost connection is said once,
/// its return once, and a lasting outage every [`UNREACHABLE_REMINDER`]
/// (through [`Link::set_reporter`], standard error by default).
#[derive(Clone)]
pub struct Link {
    rt: Arc<Runtime>,
    client: async_nats::Client,
    js: jetstream::Context,
    url: String,
    health: Arc<std::sync::Mutex<Health>>,
    reporter: Reporter,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Link {
    /// Connects (within 10 s); authorization and TLS failures are named.
    pub fn connect(o: &NatsOptions) -> Result<Self, TransportError> {
        if !crate::host_is_little_endian() {
            return Err(TransportError::Invalid(
                "rulka's chunks are little-endian; this host is big-endian".into(),
            ));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rulka-nats")
            .enable_all()
            .build()
            .map_err(|e| nats_err("starting the runtime", e))?;
        let health = Arc::new(std::sync::Mutex::new(Health {
            connected: true,
            since: Instant::now(),
            drops: 0,
            reconnects: 0,
            said: Instant::now(),
        }));
        let name = if o.name.is_empty() { "rulka".to_string() } else { o.name.clone() };
        let reporter: Reporter = Arc::new(std::sync::Mutex::new(Box::new(move |m: &str| {
            tracing::info!("[{name}] {m}");
        })));
        let url = o.url.clone();
        let (h, r, u) = (health.clone(), reporter.clone(), url.clone());
        let mut opts = async_nats::ConnectOptions::new()
            .name(&o.name)
            .connection_timeout(Duration::from_secs(10))
            .request_timeout(Some(API_DEADLINE))
            .ping_interval(Duration::from_secs(5))
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((50 * attempts as u64).min(1000))
            })
            .event_callback(move |event| {
                let (h, r, u) = (h.clone(), r.clone(), u.clone());
                async move {
                    let msg = match event {
                        async_nats::Event::Disconnected => {
                            let Ok(mut h) = h.lock() else { return };
                            if !h.connected {
                                return;
                            }
                            h.connected = false;
                            h.since = Instant::now();
                            h.said = Instant::now();
                            h.drops += 1;
                            format!("NATS connection to {u} lost; reconnecting")
                        }
                        async_nats::Event::Connected => {
                            let Ok(mut h) = h.lock() else { return };
                            if h.connected {
                                return;
                            }
                            let down = h.since.elapsed();
                            h.connected = true;
                            h.since = Instant::now();
                            h.reconnects += 1;
                            format!("NATS connection to {u} back after {:.1} s", down.as_secs_f64())
                        }
                        _ => return,
                    };
                    say(&r, &msg);
                }
            });
        if let Some(t) = &o.token {
            opts = opts.token(t.clone());
        }
        if let (Some(u), Some(p)) = (&o.user, &o.password) {
            opts = opts.user_and_password(u.clone(), p.clone());
        }
        if let Some(tls) = &o.tls {
            opts = opts.require_tls(true);
            if let Some(ca) = &tls.ca {
                opts = opts.add_root_certificates(ca.clone());
            }
            if let (Some(c), Some(k)) = (&tls.cert, &tls.key) {
                opts = opts.add_client_certificate(c.clone(), k.clone());
            }
        }
        let client = rt.block_on(opts.connect(url.as_str())).map_err(|e| {
            let message = e.to_string();
            match e.kind() {
                ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                    TransportError::Auth { url: url.clone(), message }
                }
                ConnectErrorKind::Tls => TransportError::Tls { url: url.clone(), message },
                _ if ["tls", "certificate", "handshake", "alert"]
                    .iter()
                    .any(|w| message.to_lowercase().contains(w)) =>
                {
                    TransportError::Tls { url: url.clone(), message }
                }
                // A TLS client talking to a plain server reads its greeting as a corrupt record.
                ConnectErrorKind::Io if o.tls.is_some() => TransportError::Tls {
                    url: url.clone(),
                    message: format!("handshake failed (does the server offer TLS?): {message}"),
                },
                _ => nats_err(&format!("connecting to {url}"), message),
            }
        })?;
        let js = {
            let _in_runtime = rt.enter();
            jetstream::new(client.clone())
        };
        // A lasting outage is said again every UNREACHABLE_REMINDER.
        let (h, r, u) = (Arc::downgrade(&health), reporter.clone(), url.clone());
        rt.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let Some(h) = h.upgrade() else { return };
                let msg = {
                    let Ok(mut h) = h.lock() else { return };
                    if h.connected || h.said.elapsed() < UNREACHABLE_REMINDER {
                        continue;
                    }
                    h.said = Instant::now();
                    format!(
                        "NATS {u} unreachable for {:.0} s, retrying",
                        h.since.elapsed().as_secs_f64()
                    )
                };
                say(&r, &msg);
            }
        });
        Ok(Self { rt: Arc::new(rt), client, js, url, health, reporter })
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's largest accepted message, bytes.
    pub fn max_payload(&self) -> usize {
        self.client.server_info().max_payload
    }

    /// Where the connection's news goes (lost, back, still unreachable): a
    /// progress bar's printer, a log. Standard error by default.
    pub fn set_reporter(&self, f: impl Fn(&str) + Send + 'static) {
        if let Ok(mut r) = self.reporter.lock() {
            *r = Box::new(f);
        }
    }

    /// What the connection is doing now.
    pub fn status(&self) -> LinkStatus {
        match self.health.lock() {
            Ok(h) => LinkStatus {
                connected: h.connected,
                for_time: h.since.elapsed(),
                drops: h.drops,
                reconnects: h.reconnects,
            },
            Err(_) => {
                LinkStatus { connected: true, for_time: Duration::ZERO, drops: 0, reconnects: 0 }
            }
        }
    }

    /// `Err(Unreachable)` while the connection is down, so that a caller
    /// that must not wait (the trainer's loop, a collector) skips the call.
    fn ensure_connected(&self, op: &str) -> Result<(), TransportError> {
        let s = self.status();
        if s.connected {
            Ok(())
        } else {
            Err(TransportError::Unreachable {
                op: op.to_string(),
                url: self.url.clone(),
                down_for: s.for_time,
            })
        }
    }

    /// Runs `f` on the link's runtime for at most `limit`.
    fn call<T, F>(&self, op: &str, limit: Duration, f: F) -> Result<T, TransportError>
    where
        F: std::future::Future<Output = Result<T, TransportError>>,
    {
        let r = self.rt.block_on(async {
            tokio::time::timeout(limit, f).await.unwrap_or_else(|_| {
                Err(TransportError::Timeout {
                    op: op.to_string(),
                    url: self.url.clone(),
                    after: limit,
                })
            })
        });
        // The client's own request timeout is a timeout too, said as one.
        match r {
            Err(TransportError::Nats { op, message })
                if message.contains("timed out") || message.contains("TimedOut") =>
            {
                Err(TransportError::Timeout { op, url: self.url.clone(), after: API_DEADLINE })
            }
            r => r,
        }
    }

    fn lookup_err(
        &self,
        names: &RunNames,
        what: &str,
        e: impl std::error::Error + 'static,
    ) -> TransportError {
        if is_not_found(&e) {
            TransportError::NoRun {
                run: names.run.clone(),
                url: self.url.clone(),
                message: format!("no {what} (is its trainer started?)"),
            }
        } else {
            nats_err(&format!("opening the run's {what}"), e)
        }
    }

    async fn kv(&self, names: &RunNames) -> Result<kv::Store, TransportError> {
        self.js
            .get_key_value(&names.kv)
            .await
            .map_err(|e| self.lookup_err(names, "key-value bucket", e))
    }

    async fn objects(&self, names: &RunNames) -> Result<object_store::ObjectStore, TransportError> {
        self.js
            .get_object_store(&names.objects)
            .await
            .map_err(|e| self.lookup_err(names, "object store", e))
    }
}

/// Counts, with compare-and-set, the starts of whatever `key` names (a
/// collector slot, the trainer): 0 on the first.
async fn next_count(kv: &kv::Store, key: &str) -> Result<u32, TransportError> {
    for _ in 0..100 {
        let entry = kv.entry(key).await.map_err(|e| nats_err(&format!("reading {key}"), e))?;
        let (next, rev) = match &entry {
            Some(e) if e.operation == kv::Operation::Put => {
                let n: u32 =
                    std::str::from_utf8(&e.value).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
                (n + 1, e.revision)
            }
            Some(e) => (0, e.revision),
            None => (0, 0),
        };
        let value: Bytes = next.to_string().into();
        let r = if rev == 0 {
            kv.create(key, value).await.map(|_| ()).map_err(|e| e.to_string())
        } else {
            kv.update(key, value, rev).await.map(|_| ()).map_err(|e| e.to_string())
        };
        if r.is_ok() {
            return Ok(next);
        }
    }
    Err(nats_err(&format!("counting {key}"), "100 concurrent updates in a row"))
}

// ------------------------------------------------------------------ trainer --

/// Settings of a run's stream and consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// The trajectory stream's size cap, bytes (full: `discard: new`).
    pub max_bytes: i64,
    /// Chunks one collector may have in the stream (its subject), like a
    /// shared-memory ring's capacity; -1: no limit. Must hold a whole
    /// trajectory: the trainer acknowledges a trajectory's chunks only once
    /// it has all of them.
    pub max_per_collector: i64,
    /// How long the server waits for an ack before redelivering a chunk.
    pub ack_wait: Duration,
}

/// The trainer's side of a run: creates (or re-opens) the run's stream,
/// consumer, bucket and object store, and publishes the run record.
pub struct NatsTrainer {
    link: Link,
    names: RunNames,
    kv: kv::Store,
    objects: object_store::ObjectStore,
    epoch: u64,
}

impl std::fmt::Debug for NatsTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsTrainer")
            .field("run", &self.names.run)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl NatsTrainer {
    /// Creates the run's resources if needed (a restarted trainer re-opens
    /// them: unacknowledged chunks are delivered again), writes `record` and
    /// counts this trainer's incarnation (its epoch). `fresh` first deletes
    /// whatever a previous run of the same name left (its stream, bucket and
    /// object store).
    pub fn open(
        link: Link,
        record: &RunRecord,
        limits: StreamLimits,
        fresh: bool,
    ) -> Result<Self, TransportError> {
        let names = RunNames::new(&record.run)?;
        let rec = serde_json::to_vec(record).map_err(|e| TransportError::Invalid(e.to_string()))?;
        let (l, n) = (&link, &names);
        let (kv, objects, epoch) =
            link.call("opening the run", Duration::from_secs(30), async move {
                // A fresh start of the same run name still counts on from the
                // previous trainer's epoch: its collectors must take the new weights.
                let mut previous_epoch = None;
                if fresh {
                    if let Ok(kv) = l.js.get_key_value(&n.kv).await {
                        if let Ok(Some(v)) = kv.get(EPOCH_KEY).await {
                            previous_epoch =
                                std::str::from_utf8(&v).ok().and_then(|s| s.parse::<u32>().ok());
                        }
                    }
                    let _ = l.js.delete_stream(&n.stream).await;
                    let _ = l.js.delete_key_value(&n.kv).await;
                    let _ = l.js.delete_object_store(&n.objects).await;
                }
                l.js.get_or_create_stream(stream::Config {
                    name: n.stream.clone(),
                    subjects: vec![n.subjects()],
                    retention: stream::RetentionPolicy::WorkQueue,
                    storage: stream::StorageType::File,
                    max_bytes: limits.max_bytes,
                    max_messages_per_subject: limits.max_per_collector,
                    discard: stream::DiscardPolicy::New,
                    discard_new_per_subject: limits.max_per_collector > 0,
                    // A collector's outbox may resend a chunk long after its first
                    // try: the server still knows the id for this long.
                    duplicate_window: Duration::from_secs(600),
                    ..Default::default()
                })
                .await
                .map_err(|e| nats_err("creating the trajectory stream", e))?;
                let kv =
                    l.js.create_or_update_key_value(kv::Config {
                        bucket: n.kv.clone(),
                        history: 1,
                        storage: stream::StorageType::File,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| nats_err("creating the run's key-value bucket", e))?;
                let objects =
                    l.js.create_object_store(object_store::Config {
                        bucket: n.objects.clone(),
                        storage: stream::StorageType::File,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| nats_err("creating the run's object store", e))?;
                kv.put("run", rec.into())
                    .await
                    .map_err(|e| nats_err("writing the run record", e))?;
                if let Some(e) = previous_epoch {
                    kv.put(EPOCH_KEY, e.to_string().into())
                        .await
                        .map_err(|e| nats_err("carrying the trainer epoch over", e))?;
                }
                let epoch = next_count(&kv, EPOCH_KEY).await?;
                Ok::<_, TransportError>((kv, objects, u64::from(epoch)))
            })?;
        Ok(Self { link, names, kv, objects, epoch })
    }

    /// The run's names.
    pub fn names(&self) -> &RunNames {
        &self.names
    }

    /// This trainer's incarnation on the run (0 for its first start).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The connection (for its status, and where its news goes).
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// Stores a file (e.g. a map's zone centres) in the run's object store.
    pub fn put_object(&self, name: &str, bytes: &[u8]) -> Result<(), TransportError> {
        let store = &self.objects;
        self.link.call(&format!("storing {name}"), transfer_deadline(bytes.len()), async move {
            store
                .put(name, &mut &bytes[..])
                .await
                .map_err(|e| nats_err(&format!("storing {name}"), e))?;
            Ok(())
        })
    }

    /// The trajectory source for this run: the durable pull consumer
    /// `trainer` (re-created, so that whatever a previous trainer pulled
    /// without taking comes again at once), chunks of `layout`.
    pub fn rollouts(
        &self,
        layout: ChunkLayout,
        limits: StreamLimits,
    ) -> Result<NatsRollouts, TransportError> {
        let (l, n) = (&self.link, &self.names);
        let consumer =
            self.link.call("creating the trainer's consumer", API_DEADLINE * 3, async move {
                let stream =
                    l.js.get_stream(&n.stream)
                        .await
                        .map_err(|e| nats_err("opening the trajectory stream", e))?;
                // A fresh consumer each start: chunks the previous trainer had pulled
                // but not acknowledged come again at once, not after the ack wait
                // (acknowledged ones are gone from the work queue).
                let _ = stream.delete_consumer("trainer").await;
                stream
                    .get_or_create_consumer(
                        "trainer",
                        consumer::pull::Config {
                            durable_name: Some("trainer".into()),
                            ack_policy: consumer::AckPolicy::Explicit,
                            ack_wait: limits.ack_wait,
                            max_ack_pending: 1_000_000,
                            ..Default::default()
                        },
                    )
                    .await
                    .map_err(|e| nats_err("creating the trainer's consumer", e))
            })?;
        Ok(NatsRollouts {
            link: self.link.clone(),
            consumer,
            layout,
            schema: schema_hash(&layout),
            ack_wait: limits.ack_wait,
            partials: HashMap::new(),
            newest: HashMap::new(),
            taken: HashSet::new(),
            given_up: HashSet::new(),
            seqs: HashMap::new(),
            ready: Vec::new(),
            stats: SourceStats::default(),
            abandoned: Vec::new(),
        })
    }

    /// The weight sink for this run (its records carry this trainer's epoch).
    pub fn weights(&self, network_hash: &str) -> NatsWeights {
        NatsWeights {
            link: self.link.clone(),
            kv: self.kv.clone(),
            objects: self.objects.clone(),
            network_hash: network_hash.to_string(),
            epoch: self.epoch,
            kept: VecDeque::new(),
        }
    }

    /// What the run's collectors say about themselves (`alive.<id>`),
    /// refreshed every [`ALIVE_EVERY`] on the link's runtime.
    pub fn remote_collectors(&self) -> RemoteCollectors {
        let seen: Arc<std::sync::Mutex<BTreeMap<u32, Heard>>> = Arc::default();
        let (kv, s) = (self.kv.clone(), Arc::downgrade(&seen));
        self.link.rt.spawn(async move {
            loop {
                let Some(seen) = s.upgrade() else { return };
                let read = async {
                    let mut keys = kv.keys().await.map_err(|e| e.to_string())?;
                    let mut found = Vec::new();
                    while let Some(k) = keys.next().await {
                        let Ok(k) = k else { break };
                        if let Some(id) =
                            k.strip_prefix("alive.").and_then(|i| i.parse::<u32>().ok())
                        {
                            if let Ok(Some(e)) = kv.entry(k.as_str()).await {
                                if let Ok(a) = serde_json::from_slice::<Alive>(&e.value) {
                                    let created: std::time::SystemTime = e.created.into();
                                    let age = created.elapsed().unwrap_or_default();
                                    found.push((id, e.revision, a, age));
                                }
                            }
                        }
                    }
                    Ok::<_, String>(found)
                };
                if let Ok(Ok(found)) = tokio::time::timeout(API_DEADLINE * 2, read).await {
                    if let Ok(mut map) = seen.lock() {
                        for (id, revision, alive, age) in found {
                            // First heard: as old as the record (a dead collector's
                            // last record is not news); later: when it changed.
                            let at = match map.get(&id) {
                                Some(h) if h.revision == revision => continue,
                                Some(_) => Instant::now(),
                                None => {
                                    Instant::now().checked_sub(age).unwrap_or_else(Instant::now)
                                }
                            };
                            map.insert(id, Heard { alive, revision, at });
                        }
                    }
                }
                drop(seen);
                tokio::time::sleep(ALIVE_EVERY).await;
            }
        });
        RemoteCollectors { seen }
    }
}

/// The last `alive.<id>` record heard from a collector.
#[derive(Debug, Clone)]
struct Heard {
    alive: Alive,
    revision: u64,
    at: Instant,
}

/// The trainer's view of its run's collectors, from their `alive.<id>` records.
#[derive(Debug, Clone)]
pub struct RemoteCollectors {
    seen: Arc<std::sync::Mutex<BTreeMap<u32, Heard>>>,
}

impl RemoteCollectors {
    /// Every collector heard from: its last record and how long ago it came.
    pub fn heard(&self) -> Vec<(Alive, Duration)> {
        self.seen
            .lock()
            .map(|m| m.values().map(|h| (h.alive.clone(), h.at.elapsed())).collect())
            .unwrap_or_default()
    }
}

/// One chunk held until its trajectory is complete.
struct HeldChunk {
    steps: Steps,
    header: ChunkHeader,
    message: jetstream::Message,
    since: Instant,
}

#[derive(Default)]
struct NatsPartial {
    chunks: BTreeMap<u64, HeldChunk>,
    /// When its last new chunk arrived.
    last_arrival: Option<Instant>,
}

/// The chunk sequence numbers (`Rulka-Seq`) of one collector incarnation:
/// the next expected, and those skipped so far that have not come since.
#[derive(Debug, Default)]
struct SeqTrack {
    next: u64,
    gaps: BTreeSet<u64>,
}

/// At most this many skipped sequence numbers are remembered per collector
/// incarnation (older ones count as lost).
const GAPS_KEPT: u64 = 4096;

impl NatsPartial {
    /// The steps in order when every chunk from step 0 to the last is held.
    fn complete(&self) -> bool {
        let mut next = 0u64;
        for (&first, c) in &self.chunks {
            if first != next {
                return false;
            }
            next = first + c.steps.len() as u64;
            if c.header.is_last {
                return true;
            }
        }
        false
    }
}

/// The trainer's trajectory source over NATS (see the module docs).
pub struct NatsRollouts {
    link: Link,
    consumer: consumer::Consumer<consumer::pull::Config>,
    layout: ChunkLayout,
    schema: String,
    ack_wait: Duration,
    partials: HashMap<(u32, u64), NatsPartial>,
    /// The newest trajectory each collector has sent a chunk of.
    newest: HashMap<u32, u64>,
    taken: HashSet<(u32, u64)>,
    /// Trajectories dropped as incomplete: a chunk of theirs coming late is ignored.
    given_up: HashSet<(u32, u64)>,
    seqs: HashMap<(u32, u64), SeqTrack>,
    ready: Vec<((u32, u64), NatsPartial)>,
    stats: SourceStats,
    abandoned: Vec<(u32, u64)>,
}

impl std::fmt::Debug for NatsRollouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsRollouts")
            .field("partials", &self.partials.len())
            .finish_non_exhaustive()
    }
}

fn header_str<'a>(h: Option<&'a HeaderMap>, key: &str) -> Option<&'a str> {
    h.and_then(|h| h.get(key)).map(|v| v.as_str())
}

impl NatsRollouts {
    /// Chunks whose per-incarnation sequence number was skipped and has not
    /// come since (dropped by a collector under back-pressure, lost, or still
    /// on its way: a chunk delivered to a pull that timed out comes again
    /// after the ack wait, behind later ones).
    pub fn missing_chunks(&self) -> u64 {
        self.seqs.values().map(|t| t.gaps.len() as u64).sum()
    }

    /// Drops, as incomplete, the partial trajectories that can no longer
    /// complete: a later trajectory of their collector has begun, and either
    /// their collector incarnation has no chunk outstanding (every sequence
    /// number up to its newest has come), or the chunks outstanding had
    /// twice the ack wait to be delivered again and did not come.
    fn drop_dead_partials(&mut self) -> Vec<jetstream::Message> {
        let patience = self.ack_wait * 2;
        let dead: Vec<(u32, u64)> = self
            .partials
            .iter()
            .filter(|(k, p)| {
                let later = self.newest.get(&k.0).is_some_and(|&n| n > k.1);
                let inc = u64::from(TrajectoryId::unpack(k.0, k.1).incarnation);
                let outstanding = self.seqs.get(&(k.0, inc)).is_some_and(|t| !t.gaps.is_empty());
                let waited = p.last_arrival.is_none_or(|t| t.elapsed() >= patience);
                later && (!outstanding || waited)
            })
            .map(|(k, _)| *k)
            .collect();
        let mut acks = Vec::new();
        for k in dead {
            if let Some(p) = self.partials.remove(&k) {
                self.stats.incomplete_dropped += 1;
                self.abandoned.push(k);
                self.given_up.insert(k);
                acks.extend(p.chunks.into_values().map(|c| c.message));
            }
        }
        acks
    }

    /// Trajectories held incomplete now.
    pub fn partials(&self) -> usize {
        self.partials.len()
    }

    /// Handles one delivered chunk; a trajectory it completes moves to `ready`.
    fn accept(&mut self, m: jetstream::Message, acks: &mut Vec<jetstream::Message>) {
        let h = m.headers.as_ref();
        if header_str(h, H_SCHEMA) != Some(self.schema.as_str())
            || header_str(h, H_BYTE_ORDER) != Some("le")
        {
            self.stats.rejected += 1;
            acks.push(m);
            return;
        }
        let Ok((header, steps)) = read_chunk(&self.layout, &m.payload) else {
            self.stats.rejected += 1;
            acks.push(m);
            return;
        };
        let key = (header.collector, header.trajectory);
        let incarnation = u64::from(TrajectoryId::of(&header).incarnation);
        if let Some(seq) = header_str(h, H_SEQ).and_then(|s| s.parse::<u64>().ok()) {
            let t = self.seqs.entry((header.collector, incarnation)).or_default();
            if seq >= t.next {
                t.gaps.extend(t.next.max(seq.saturating_sub(GAPS_KEPT))..seq);
                t.next = seq + 1;
            } else {
                t.gaps.remove(&seq);
            }
        }
        if self.taken.contains(&key)
            || self.given_up.contains(&key)
            || self.ready.iter().any(|(k, _)| *k == key)
        {
            self.stats.repeats_ignored += 1;
            acks.push(m);
            return;
        }
        let newest = self.newest.entry(header.collector).or_insert(header.trajectory);
        *newest = (*newest).max(header.trajectory);
        let partial = self.partials.entry(key).or_default();
        partial.last_arrival = Some(Instant::now());
        match partial.chunks.get_mut(&header.first_step) {
            Some(held) => {
                // Delivered again (ack wait passed): keep the newest delivery to ack.
                self.stats.repeats_ignored += 1;
                held.message = m;
                held.since = Instant::now();
            }
            None => {
                partial.chunks.insert(
                    header.first_step,
                    HeldChunk { steps, header, message: m, since: Instant::now() },
                );
            }
        }
        if partial.complete() {
            if let Some(p) = self.partials.remove(&key) {
                self.ready.push((key, p));
            }
        }
    }
}

impl RolloutSource for NatsRollouts {
    fn poll(&mut self, out: &mut Vec<Trajectory>, timeout: Duration) -> Result<(), TransportError> {
        if self.link.ensure_connected("pulling chunks").is_err() {
            // Reconnecting: nothing can come; unacked chunks are redelivered later.
            std::thread::sleep(timeout);
            return Ok(());
        }
        let consumer = &self.consumer;
        let expires = timeout.max(Duration::from_millis(20));
        let batch = self.link.call("pulling chunks", expires + POLL_SLACK, async move {
            // What is there now (no wait); if nothing, wait for the first chunk
            // only (a pull returns at its expiry unless it is filled), then
            // take whatever followed it.
            let mut got = pull(consumer, 256, None).await?;
            if got.is_empty() {
                got = pull(consumer, 1, Some(expires)).await?;
                if !got.is_empty() {
                    got.extend(pull(consumer, 255, None).await?);
                }
            }
            Ok::<_, TransportError>(got)
        });
        let batch = match batch {
            Ok(b) => b,
            // The connection reconnects by itself; nothing is lost (unacked
            // chunks come again). The link says when it is down.
            Err(_) => return Ok(()),
        };
        let mut plain = Vec::new();
        for m in batch {
            self.accept(m, &mut plain);
        }
        plain.extend(self.drop_dead_partials());
        let done = std::mem::take(&mut self.ready);
        let refresh_after = self.ack_wait / 2;
        let mut to_refresh = Vec::new();
        for p in self.partials.values_mut() {
            for c in p.chunks.values_mut() {
                if c.since.elapsed() >= refresh_after {
                    c.since = Instant::now();
                    to_refresh.push(c.message.clone());
                }
            }
        }
        let d = &done;
        let limit = POLL_SLACK + Duration::from_millis(50 * done.len() as u64);
        // Past the deadline nothing is lost: the unconfirmed trajectories stay
        // ready (their chunks held) and are confirmed at the next poll.
        let oks = self
            .link
            .call("acknowledging chunks", limit, async move {
                for m in &plain {
                    let _ = m.ack().await;
                }
                for m in &to_refresh {
                    let _ = m.ack_with(jetstream::AckKind::Progress).await;
                }
                let mut oks = Vec::with_capacity(d.len());
                for (_, p) in d {
                    // Taken only once the server confirms every chunk's ack.
                    let acks = futures::future::join_all(
                        p.chunks.values().map(|c| c.message.double_ack()),
                    )
                    .await;
                    oks.push(acks.iter().all(Result::is_ok));
                }
                Ok(oks)
            })
            .unwrap_or_else(|_| vec![false; done.len()]);
        let confirmed = done.into_iter().zip(oks).map(|((key, p), ok)| (key, p, ok));
        for (key, p, ok) in confirmed {
            if !ok {
                // Not confirmed: try again next poll (a lost ack means its chunks come again).
                self.ready.push((key, p));
                continue;
            }
            self.taken.insert(key);
            let mut steps = Steps::default();
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            let group = p.chunks.values().next().map_or(0, |c| c.header.group);
            for c in p.chunks.values() {
                steps.extend(&c.steps);
                lo = lo.min(c.header.policy_version);
                hi = hi.max(c.header.policy_version);
            }
            out.push(Trajectory {
                collector: key.0,
                trajectory: key.1,
                group,
                policy_versions: (lo, hi),
                steps,
            });
        }
        Ok(())
    }

    fn finish(&mut self) {
        self.stats.incomplete_dropped += self.partials.len() as u64;
        self.partials.clear();
    }

    fn take_abandoned(&mut self) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.abandoned)
    }

    fn stats(&self) -> SourceStats {
        self.stats
    }
}

/// Pulls up to `max` chunks: what is available now (`wait` None), or
/// waiting up to `wait` until `max` came.
async fn pull(
    consumer: &consumer::Consumer<consumer::pull::Config>,
    max: usize,
    wait: Option<Duration>,
) -> Result<Vec<jetstream::Message>, TransportError> {
    let mut got = Vec::new();
    let msgs = match wait {
        None => consumer.fetch().max_messages(max).messages().await,
        Some(w) => consumer.batch().max_messages(max).expires(w).messages().await,
    };
    let mut msgs = msgs.map_err(|e| nats_err("pulling chunks", e))?;
    while let Some(m) = msgs.next().await {
        match m {
            Ok(m) => got.push(m),
            Err(e) if got.is_empty() => return Err(nats_err("pulling chunks", e)),
            Err(_) => break,
        }
    }
    Ok(got)
}

/// The trainer's weight sink over NATS.
pub struct NatsWeights {
    link: Link,
    kv: kv::Store,
    objects: object_store::ObjectStore,
    network_hash: String,
    epoch: u64,
    kept: VecDeque<String>,
}

impl std::fmt::Debug for NatsWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsWeights")
            .field("epoch", &self.epoch)
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

impl WeightSink for NatsWeights {
    fn publish(&mut self, version: u64, bytes: &[u8]) -> Result<(), TransportError> {
        let op = format!("publishing weights v{version}");
        self.link.ensure_connected(&op)?;
        let name = format!("weights-e{:04}-v{version:012}", self.epoch);
        let latest = Latest {
            version,
            name: name.clone(),
            sha256: hex::encode(Sha256::digest(bytes)),
            size: bytes.len(),
            network_hash: self.network_hash.clone(),
            epoch: self.epoch,
        };
        let record =
            serde_json::to_vec(&latest).map_err(|e| TransportError::Invalid(e.to_string()))?;
        let (store, kv, n) = (&self.objects, &self.kv, &name);
        self.link.call(&op, transfer_deadline(bytes.len()), async move {
            store
                .put(n.as_str(), &mut &bytes[..])
                .await
                .map_err(|e| nats_err(&format!("storing weights v{version}"), e))?;
            kv.put("latest", record.into())
                .await
                .map_err(|e| nats_err("announcing the latest weights", e))?;
            Ok(())
        })?;
        self.kept.push_back(name);
        if self.kept.len() > WEIGHT_VERSIONS_KEPT {
            let old: Vec<String> =
                self.kept.drain(..self.kept.len() - WEIGHT_VERSIONS_KEPT).collect();
            let store = &self.objects;
            // Best effort: a left-over object costs space, not correctness.
            let _ = self.link.call("deleting old weights", API_DEADLINE, async move {
                for o in old {
                    let _ = store.delete(o.as_str()).await;
                }
                Ok(())
            });
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- collector --

/// A collector's view of a run on a NATS server.
#[derive(Debug)]
pub struct NatsCollector {
    link: Link,
    names: RunNames,
    record: RunRecord,
    kv: kv::Store,
    /// Shared with the chunk sink and the weight source: what `alive.<id>` says.
    alive: Arc<std::sync::Mutex<Alive>>,
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "?".into())
}

impl NatsCollector {
    /// Joins run `run`: reads its record (the run must exist: the trainer
    /// creates it), waiting up to `wait` for it to appear.
    pub fn join(link: Link, run: &str, wait: Duration) -> Result<Self, TransportError> {
        let names = RunNames::new(run)?;
        let (l, n) = (&link, &names);
        let (kv, record) = link.call("joining the run", wait + API_DEADLINE, async move {
            let deadline = Instant::now() + wait;
            loop {
                let attempt = async {
                    let kv = l.kv(n).await?;
                    let v =
                        kv.get("run").await.map_err(|e| nats_err("reading the run record", e))?;
                    let v = v.ok_or_else(|| TransportError::NoRun {
                        run: n.run.clone(),
                        url: l.url.clone(),
                        message: "no run record (is its trainer started?)".into(),
                    })?;
                    Ok::<_, TransportError>((kv, v))
                };
                match attempt.await {
                    Ok((kv, b)) => {
                        let record = serde_json::from_slice::<RunRecord>(&b).map_err(|e| {
                            TransportError::Invalid(format!(
                                "run {}: unreadable run record: {e}",
                                n.run
                            ))
                        })?;
                        return Ok((kv, record));
                    }
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    Err(e) if e.is_bad_input() || e.is_connection() => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        })?;
        let alive = Alive { host: host_name(), pid: std::process::id(), ..Alive::default() };
        Ok(Self { link, names, record, kv, alive: Arc::new(std::sync::Mutex::new(alive)) })
    }

    /// The run's record (its config among others).
    pub fn record(&self) -> &RunRecord {
        &self.record
    }

    /// The connection (for its status, and where its news goes).
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// Refuses a run whose record schema or network differs from this
    /// process's (`what` names the pair in the error).
    pub fn check(&self, schema_hash: &str, network_hash: &str) -> Result<(), TransportError> {
        for (what, theirs, ours) in [
            ("the chunk record schema", &self.record.schema_hash, schema_hash),
            ("the network", &self.record.network_hash, network_hash),
        ] {
            if theirs != ours {
                return Err(TransportError::SchemaMismatch {
                    run: self.names.run.clone(),
                    what: what.into(),
                    theirs: theirs.clone(),
                    ours: ours.to_string(),
                });
            }
        }
        Ok(())
    }

    /// The next incarnation of collector slot `id` (0 on its first start),
    /// counted on the server with compare-and-set.
    pub fn next_incarnation(&self, id: u32) -> Result<u32, TransportError> {
        let kv = &self.kv;
        let key = format!("incarnation.{id}");
        self.link.call("counting incarnations", API_DEADLINE * 2, async move {
            next_count(kv, &key).await
        })
    }

    /// Downloads a file from the run's object store.
    pub fn get_object(&self, name: &str) -> Result<Vec<u8>, TransportError> {
        let (l, n) = (&self.link, &self.names);
        self.link.call(&format!("fetching {name}"), transfer_deadline(64 << 20), async move {
            let store = l.objects(n).await?;
            let mut o =
                store.get(name).await.map_err(|e| nats_err(&format!("fetching {name}"), e))?;
            let mut out = Vec::new();
            o.read_to_end(&mut out).await.map_err(|e| nats_err(&format!("reading {name}"), e))?;
            Ok(out)
        })
    }

    /// The chunk sink of collector `id` in `incarnation`: chunks the server
    /// cannot take now wait in an outbox of up to `outbox_bytes`. Starts
    /// the collector's `alive.<id>` record.
    pub fn chunk_sink(
        &self,
        id: u32,
        incarnation: u32,
        layout: ChunkLayout,
        block: Option<Duration>,
        outbox_bytes: usize,
    ) -> NatsChunkSink {
        if let Ok(mut a) = self.alive.lock() {
            a.id = id;
            a.incarnation = incarnation;
        }
        let (kv, alive) = (self.kv.clone(), Arc::downgrade(&self.alive));
        let key = format!("alive.{id}");
        self.link.rt.spawn(async move {
            loop {
                let Some(a) = alive.upgrade() else { return };
                let record = a.lock().ok().and_then(|a| serde_json::to_vec(&*a).ok());
                drop(a);
                if let Some(r) = record {
                    let _ =
                        tokio::time::timeout(API_DEADLINE, kv.put(key.as_str(), r.into())).await;
                }
                tokio::time::sleep(ALIVE_EVERY).await;
            }
        });
        NatsChunkSink {
            link: self.link.clone(),
            subject: self.names.subject(id),
            run: self.names.run.clone(),
            incarnation,
            layout,
            schema: schema_hash(&layout),
            block,
            seq: 0,
            stats: SinkStats::default(),
            outbox: VecDeque::new(),
            outbox_bytes: 0,
            outbox_max: outbox_bytes.max(1),
            retry_at: None,
            backoff: Duration::from_millis(250),
            alive: self.alive.clone(),
        }
    }

    /// The weight source of this run (a watch on the `latest` record).
    pub fn weight_source(&self) -> Result<NatsWeightSource, TransportError> {
        let (tx, rx) = tokio::sync::watch::channel::<Option<Latest>>(None);
        // The task holds no `Link`: the runtime must never be dropped from inside itself.
        let kv = self.kv.clone();
        let offer = move |latest: Latest, tx: &tokio::sync::watch::Sender<Option<Latest>>| {
            let held = tx.borrow().as_ref().map(|c| (c.epoch, c.version));
            if latest.supersedes(held) {
                let _ = tx.send(Some(latest));
            }
        };
        let watcher = self.link.rt.spawn(async move {
            let read = |kv: kv::Store| async move {
                match tokio::time::timeout(API_DEADLINE, kv.get("latest")).await {
                    Ok(Ok(Some(v))) => serde_json::from_slice::<Latest>(&v).ok(),
                    _ => None,
                }
            };
            loop {
                // The record's watch, with a direct read whenever it has been
                // quiet for a second (a restarted server, or a watch that
                // silently stopped, costs at most that), re-made every 10 s.
                if let Some(l) = read(kv.clone()).await {
                    offer(l, &tx);
                }
                match tokio::time::timeout(API_DEADLINE, kv.watch("latest")).await {
                    Ok(Ok(mut w)) => {
                        let until = tokio::time::Instant::now() + Duration::from_secs(10);
                        while tokio::time::Instant::now() < until {
                            match tokio::time::timeout(Duration::from_secs(1), w.next()).await {
                                Ok(Some(Ok(e))) => {
                                    if let Ok(l) = serde_json::from_slice::<Latest>(&e.value) {
                                        offer(l, &tx);
                                    }
                                }
                                Ok(_) => break,
                                Err(_) => {
                                    if let Some(l) = read(kv.clone()).await {
                                        offer(l, &tx);
                                    }
                                }
                            }
                        }
                    }
                    _ => tokio::time::sleep(Duration::from_millis(500)).await,
                }
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(NatsWeightSource {
            link: self.link.clone(),
            names: self.names.clone(),
            rx,
            watcher,
            failed: None,
            delivered: None,
            alive: self.alive.clone(),
        })
    }
}

/// A chunk waiting in a collector's outbox.
#[derive(Debug)]
struct Outgoing {
    trajectory: u64,
    id: String,
    payload: Bytes,
    headers: HeaderMap,
}

/// A collector's chunk sink over NATS: chunks go out in order through an
/// outbox, which holds them while the server is out of reach.
#[derive(Debug)]
pub struct NatsChunkSink {
    link: Link,
    subject: String,
    run: String,
    incarnation: u32,
    layout: ChunkLayout,
    schema: String,
    block: Option<Duration>,
    seq: u64,
    stats: SinkStats,
    outbox: VecDeque<Outgoing>,
    outbox_bytes: usize,
    outbox_max: usize,
    retry_at: Option<Instant>,
    backoff: Duration,
    alive: Arc<std::sync::Mutex<Alive>>,
}

fn stream_full(message: &str) -> bool {
    let m = message.to_lowercase();
    m.contains("maximum bytes") || m.contains("maximum messages") || m.contains("resource limits")
}

/// How an attempt to empty the outbox ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flushed {
    /// Empty.
    All,
    /// The server is out of reach: the rest waits.
    Held,
    /// A full stream made it wait and `keep_waiting` said stop.
    Abandoned,
}

impl NatsChunkSink {
    fn note(&mut self) {
        self.stats.queued = self.outbox.len() as u64;
        self.stats.queued_bytes = self.outbox_bytes as u64;
        if let Ok(mut a) = self.alive.lock() {
            a.chunks = self.stats.chunks;
            a.queued = self.stats.queued;
            a.outbox_dropped = self.stats.outbox_dropped;
        }
    }

    fn pop(&mut self) {
        if let Some(o) = self.outbox.pop_front() {
            self.outbox_bytes -= o.payload.len();
        }
    }

    /// Drops the oldest whole trajectories while the outbox is over its bound.
    fn bound(&mut self) {
        while self.outbox_bytes > self.outbox_max {
            let Some(t) = self.outbox.front().map(|o| o.trajectory) else { break };
            while self.outbox.front().is_some_and(|o| o.trajectory == t) {
                self.pop();
            }
            self.stats.outbox_dropped += 1;
        }
    }

    /// Sends the outbox's chunks in order until it is empty, the server is
    /// out of reach (they wait: [`Flushed::Held`]), or `keep_waiting` stops
    /// a wait on a full stream.
    fn flush_outbox(
        &mut self,
        keep_waiting: &mut dyn FnMut() -> bool,
    ) -> Result<Flushed, TransportError> {
        let mut waited_full = false;
        let mut sent = 0u64;
        loop {
            let Some(front) = self.outbox.front() else { return Ok(Flushed::All) };
            // A long backlog: the heartbeat goes on, and a stop leaves the rest held.
            if sent % 16 == 15 && !keep_waiting() {
                return Ok(Flushed::Held);
            }
            if self.retry_at.is_some_and(|t| Instant::now() < t)
                || self.link.ensure_connected("sending chunks").is_err()
            {
                return Ok(Flushed::Held);
            }
            let js = &self.link.js;
            let publish = jetstream::message::PublishMessage::build()
                .payload(front.payload.clone())
                .headers(front.headers.clone())
                .message_id(front.id.as_str());
            let subject = self.subject.clone();
            let r = self.link.call("sending a chunk", CHUNK_DEADLINE, async move {
                let ack =
                    js.send_publish(subject, publish).await.map_err(|e| nats_err("publish", e))?;
                ack.await.map_err(|e| nats_err("publish", e))
            });
            match r {
                Ok(_) => {
                    self.pop();
                    sent += 1;
                    self.stats.chunks += 1;
                    self.backoff = Duration::from_millis(250);
                    self.retry_at = None;
                    waited_full = false;
                }
                Err(TransportError::Nats { message, .. }) if stream_full(&message) => {
                    if self.block.is_none() {
                        self.pop();
                        self.stats.dropped += 1;
                        continue;
                    }
                    if !waited_full {
                        self.stats.full_waits += 1;
                        waited_full = true;
                    }
                    if !keep_waiting() {
                        return Ok(Flushed::Abandoned);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(TransportError::Nats { message, .. })
                    if message.to_lowercase().contains("permissions violation") =>
                {
                    return Err(TransportError::Auth { url: self.link.url.clone(), message });
                }
                Err(_) => {
                    // Timed out or failed: the server may have stored it; a resend
                    // carries the same message id, which the server stores once.
                    self.stats.retries += 1;
                    self.retry_at = Some(Instant::now() + self.backoff);
                    self.backoff = (self.backoff * 2).min(Duration::from_secs(5));
                    return Ok(Flushed::Held);
                }
            }
        }
    }
}

impl ChunkSink for NatsChunkSink {
    fn send(
        &mut self,
        header: &ChunkHeader,
        steps: &Steps,
        keep_waiting: &mut dyn FnMut() -> bool,
    ) -> Result<Sent, TransportError> {
        let payload: Bytes = encode_chunk(&self.layout, header, steps)?.into();
        let chunk = header.first_step / self.layout.max_steps.max(1) as u64;
        let seq = TrajectoryId::of(header).sequence;
        let id = format!("{}.{}.{}.{seq}.{chunk}", self.run, header.collector, self.incarnation);
        let mut headers = HeaderMap::new();
        headers.insert(H_POLICY_VERSION, header.policy_version.to_string().as_str());
        headers.insert(H_SEQ, self.seq.to_string().as_str());
        headers.insert(H_SCHEMA, self.schema.as_str());
        headers.insert(H_BYTE_ORDER, "le");
        self.seq += 1;
        let (before_chunks, before_dropped) = (self.stats.chunks, self.stats.dropped);
        self.outbox_bytes += payload.len();
        self.outbox.push_back(Outgoing {
            trajectory: header.trajectory,
            id: id.clone(),
            payload,
            headers,
        });
        let mut flushed = self.flush_outbox(keep_waiting)?;
        if self.block.is_some() {
            // Back-pressure: a full outbox makes the collector wait, as a full
            // stream does, until the server takes chunks again (or it is stopped).
            let mut waited = false;
            while self.outbox_bytes > self.outbox_max && flushed != Flushed::Abandoned {
                if !waited {
                    self.stats.full_waits += 1;
                    waited = true;
                }
                if !keep_waiting() {
                    flushed = Flushed::Abandoned;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
                flushed = self.flush_outbox(keep_waiting)?;
            }
        } else {
            self.bound();
        }
        let in_outbox = self.outbox.iter().rev().any(|o| o.id == id);
        let sent = match flushed {
            Flushed::Abandoned if in_outbox => {
                // This chunk was not sent (the ones before it may wait too): its
                // trajectory stays incomplete.
                if let Some(i) = self.outbox.iter().rposition(|o| o.id == id) {
                    if let Some(o) = self.outbox.remove(i) {
                        self.outbox_bytes -= o.payload.len();
                    }
                }
                Sent::Abandoned
            }
            _ if in_outbox => Sent::Queued,
            _ if self.stats.chunks > before_chunks && self.outbox.is_empty() => {
                if self.stats.dropped > before_dropped {
                    Sent::Dropped
                } else {
                    Sent::Stored
                }
            }
            // Dropped: by a full stream under the drop policy, or from a full outbox.
            _ => Sent::Dropped,
        };
        self.note();
        Ok(sent)
    }

    fn stats(&self) -> SinkStats {
        self.stats
    }

    fn report_game(&mut self, game: rulka_config::GameCounters) {
        if let Ok(mut a) = self.alive.lock() {
            a.game = Some(game);
        }
    }

    fn flush(&mut self, limit: Duration) -> u64 {
        let deadline = Instant::now() + limit;
        while !self.outbox.is_empty() && Instant::now() < deadline {
            self.retry_at = None;
            let mut before = || Instant::now() < deadline;
            if let Ok(Flushed::All) = self.flush_outbox(&mut before) {
                break;
            }
            std::thread::sleep(
                Duration::from_millis(100).min(deadline.saturating_duration_since(Instant::now())),
            );
        }
        self.note();
        self.outbox.len() as u64
    }
}

/// A collector's weight source over NATS.
pub struct NatsWeightSource {
    link: Link,
    names: RunNames,
    rx: tokio::sync::watch::Receiver<Option<Latest>>,
    watcher: tokio::task::JoinHandle<()>,
    failed: Option<((u64, u64), Instant)>,
    /// `(epoch, version)` of the last snapshot returned.
    delivered: Option<(u64, u64)>,
    alive: Arc<std::sync::Mutex<Alive>>,
}

impl std::fmt::Debug for NatsWeightSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsWeightSource").field("run", &self.names.run).finish_non_exhaustive()
    }
}

impl Drop for NatsWeightSource {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

impl NatsWeightSource {
    /// The newest snapshot announced so far.
    pub fn latest(&self) -> Option<Latest> {
        self.rx.borrow().clone()
    }

    /// `(epoch, version)` of the last snapshot returned.
    pub fn delivered(&self) -> Option<(u64, u64)> {
        self.delivered
    }
}

impl WeightSource for NatsWeightSource {
    fn wait_newer(
        &mut self,
        current: Option<u64>,
        out: &mut Vec<u8>,
        timeout: Duration,
    ) -> Result<Option<u64>, TransportError> {
        let rx = self.rx.clone();
        let (failed, delivered) = (self.failed, self.delivered);
        // What this source returned itself decides (it knows the epochs);
        // before its first, the caller's version.
        let newer = move |l: &Option<Latest>| {
            l.as_ref()
                .filter(|l| match delivered {
                    Some(d) => l.supersedes(Some(d)),
                    None => current.is_none_or(|c| l.version > c),
                })
                .filter(|l| {
                    failed.is_none_or(|(k, at)| {
                        k != (l.epoch, l.version) || at.elapsed() > Duration::from_secs(1)
                    })
                })
                .cloned()
        };
        let mut rx2 = rx.clone();
        let latest = self.link.call(
            "waiting for weights",
            timeout + Duration::from_secs(1),
            async move {
                let deadline = tokio::time::Instant::now() + timeout;
                loop {
                    if let Some(l) = newer(&rx2.borrow()) {
                        return Ok(Some(l));
                    }
                    match tokio::time::timeout_at(deadline, rx2.changed()).await {
                        Ok(Ok(())) => {}
                        _ => return Ok(None),
                    }
                }
            },
        )?;
        let Some(latest) = latest else { return Ok(None) };
        let (l, n, name) = (&self.link, &self.names, latest.name.as_str());
        let fetched =
            self.link.call("fetching weights", transfer_deadline(latest.size), async move {
                let store = l.objects(n).await?;
                let mut o =
                    store.get(name).await.map_err(|e| nats_err(&format!("fetching {name}"), e))?;
                let mut buf = Vec::new();
                o.read_to_end(&mut buf)
                    .await
                    .map_err(|e| nats_err(&format!("reading {name}"), e))?;
                Ok(buf)
            });
        let problem = match fetched {
            Ok(buf) if buf.len() != latest.size => {
                Some(format!("{} bytes, announced {}", buf.len(), latest.size))
            }
            Ok(buf) if hex::encode(Sha256::digest(&buf)) != latest.sha256 => {
                Some("SHA-256 differs from the announced one".into())
            }
            Ok(buf) => {
                *out = buf;
                self.failed = None;
                if let Some((e, v)) = self.delivered.filter(|&(e, _)| e < latest.epoch) {
                    tracing::info!(
                        "[rulka transport] weights v{} of trainer epoch {} (a restarted trainer): taken in place of v{v} of epoch {e}",
                        latest.version, latest.epoch
                    );
                }
                self.delivered = Some((latest.epoch, latest.version));
                if let Ok(mut a) = self.alive.lock() {
                    a.weights = self.delivered;
                }
                return Ok(Some(latest.version));
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(p) = problem {
            tracing::warn!(
                "[rulka transport] weights v{} (trainer epoch {}): {p}; keeping the current weights",
                latest.version, latest.epoch
            );
            self.failed = Some(((latest.epoch, latest.version), Instant::now()));
        }
        Ok(None)
    }
}
