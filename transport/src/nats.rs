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
//! Connections reconnect by themselves; publishes are retried with the same
//! message id, so a dropped network or a restarted server loses and
//! duplicates nothing. Authentication: a token, or a user and password (the
//! local server [`crate::server`] gives collectors a user that may publish
//! only its run's trajectory subjects); TLS with a CA and client certificates.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, kv, object_store, stream};
use async_nats::{ConnectErrorKind, HeaderMap};
use bytes::Bytes;
use futures::StreamExt;
use rulka_shm::chunk::{encode_chunk, read_chunk, ChunkHeader, ChunkLayout, Steps, Trajectory};
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
/// Longest wait for one weight snapshot's bytes before keeping the old weights.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);
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
}

/// Hex SHA-256 (first 16 hex digits) of a chunk layout: both ends must agree.
pub fn schema_hash(layout: &ChunkLayout) -> String {
    let s = format!("{:?}", layout.schema());
    hex::encode(&Sha256::digest(s.as_bytes())[..8])
}

fn nats_err(op: &str, e: impl std::fmt::Display) -> TransportError {
    TransportError::Nats { op: op.to_string(), message: e.to_string() }
}

/// A connection: a client and a JetStream context on a runtime of their own
/// (one worker thread: pings, reconnects and acks go on between calls).
#[derive(Clone)]
pub struct Link {
    rt: Arc<Runtime>,
    client: async_nats::Client,
    js: jetstream::Context,
    url: String,
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
        let mut opts = async_nats::ConnectOptions::new()
            .name(&o.name)
            .connection_timeout(Duration::from_secs(10))
            .request_timeout(Some(Duration::from_secs(10)))
            .ping_interval(Duration::from_secs(10))
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((50 * attempts as u64).min(1000))
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
        let url = o.url.clone();
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
        Ok(Self { rt: Arc::new(rt), client, js, url })
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's largest accepted message, bytes.
    pub fn max_payload(&self) -> usize {
        self.client.server_info().max_payload
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    async fn kv(&self, names: &RunNames) -> Result<kv::Store, TransportError> {
        self.js.get_key_value(&names.kv).await.map_err(|e| TransportError::NoRun {
            run: names.run.clone(),
            url: self.url.clone(),
            message: e.to_string(),
        })
    }

    async fn objects(&self, names: &RunNames) -> Result<object_store::ObjectStore, TransportError> {
        self.js.get_object_store(&names.objects).await.map_err(|e| TransportError::NoRun {
            run: names.run.clone(),
            url: self.url.clone(),
            message: e.to_string(),
        })
    }
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
#[derive(Debug)]
pub struct NatsTrainer {
    link: Link,
    names: RunNames,
}

impl NatsTrainer {
    /// Creates the run's resources if needed (a restarted trainer re-opens
    /// them: unacknowledged chunks are delivered again) and writes `record`.
    /// `fresh` first deletes whatever a previous run of the same name left
    /// (its stream, bucket and object store).
    pub fn open(
        link: Link,
        record: &RunRecord,
        limits: StreamLimits,
        fresh: bool,
    ) -> Result<Self, TransportError> {
        let names = RunNames::new(&record.run)?;
        let l = link.clone();
        let n = names.clone();
        let rec = serde_json::to_vec(record).map_err(|e| TransportError::Invalid(e.to_string()))?;
        link.block_on(async move {
            if fresh {
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
                duplicate_window: Duration::from_secs(120),
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
            l.js.create_object_store(object_store::Config {
                bucket: n.objects.clone(),
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .map_err(|e| nats_err("creating the run's object store", e))?;
            kv.put("run", rec.into()).await.map_err(|e| nats_err("writing the run record", e))?;
            Ok::<_, TransportError>(())
        })?;
        Ok(Self { link, names })
    }

    /// The run's names.
    pub fn names(&self) -> &RunNames {
        &self.names
    }

    /// Stores a file (e.g. a map's zone centres) in the run's object store.
    pub fn put_object(&self, name: &str, bytes: &[u8]) -> Result<(), TransportError> {
        let (l, n) = (self.link.clone(), self.names.clone());
        let data = bytes.to_vec();
        let name = name.to_string();
        self.link.block_on(async move {
            let store = l.objects(&n).await?;
            store
                .put(name.as_str(), &mut data.as_slice())
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
        let (l, n) = (self.link.clone(), self.names.clone());
        let consumer = self.link.block_on(async move {
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
            latest_incarnation: HashMap::new(),
            taken: HashSet::new(),
            seqs: HashMap::new(),
            ready: Vec::new(),
            stats: SourceStats::default(),
            missing_chunks: 0,
        })
    }

    /// The weight sink for this run.
    pub fn weights(&self, network_hash: &str) -> NatsWeights {
        NatsWeights {
            link: self.link.clone(),
            names: self.names.clone(),
            network_hash: network_hash.to_string(),
            kept: VecDeque::new(),
        }
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
}

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
    latest_incarnation: HashMap<u32, u64>,
    taken: HashSet<(u32, u64)>,
    seqs: HashMap<(u32, u64), u64>,
    ready: Vec<((u32, u64), NatsPartial)>,
    stats: SourceStats,
    missing_chunks: u64,
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
    /// Chunks whose per-incarnation sequence number skipped ahead (dropped
    /// by a collector under back-pressure, or lost).
    pub fn missing_chunks(&self) -> u64 {
        self.missing_chunks
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
        let incarnation = header.trajectory >> 40;
        if let Some(seq) = header_str(h, H_SEQ).and_then(|s| s.parse::<u64>().ok()) {
            let e = self.seqs.entry((header.collector, incarnation)).or_insert(0);
            if seq > *e {
                self.missing_chunks += seq - *e;
            }
            *e = (*e).max(seq + 1);
        }
        if self.taken.contains(&key) || self.ready.iter().any(|(k, _)| *k == key) {
            self.stats.repeats_ignored += 1;
            acks.push(m);
            return;
        }
        // A newer incarnation of the collector, or a later trajectory of the same
        // one: older partial trajectories of that collector can no longer complete.
        let latest = self.latest_incarnation.entry(header.collector).or_insert(incarnation);
        if incarnation < *latest {
            self.stats.incomplete_dropped += 1;
            acks.push(m);
            return;
        }
        *latest = incarnation;
        let stale: Vec<(u32, u64)> = self
            .partials
            .keys()
            .filter(|k| k.0 == header.collector && k.1 < header.trajectory)
            .copied()
            .collect();
        for k in stale {
            if let Some(p) = self.partials.remove(&k) {
                self.stats.incomplete_dropped += 1;
                acks.extend(p.chunks.into_values().map(|c| c.message));
            }
        }
        let partial = self.partials.entry(key).or_default();
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
        let consumer = self.consumer.clone();
        let expires = timeout.max(Duration::from_millis(20));
        let batch = self.link.block_on(async move {
            // What is there now (no wait); if nothing, wait for the first chunk
            // only (a pull returns at its expiry unless it is filled), then
            // take whatever followed it.
            let mut got = pull(&consumer, 256, None).await?;
            if got.is_empty() {
                got = pull(&consumer, 1, Some(expires)).await?;
                if !got.is_empty() {
                    got.extend(pull(&consumer, 255, None).await?);
                }
            }
            Ok::<_, TransportError>(got)
        });
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                // The connection reconnects by itself; nothing is lost (unacked chunks come again).
                eprintln!("[rulka transport] {e}; retrying");
                std::thread::sleep(Duration::from_millis(100));
                return Ok(());
            }
        };
        let mut plain = Vec::new();
        for m in batch {
            self.accept(m, &mut plain);
        }
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
        let confirmed = self.link.block_on(async move {
            for m in &plain {
                let _ = m.ack().await;
            }
            for m in &to_refresh {
                let _ = m.ack_with(jetstream::AckKind::Progress).await;
            }
            let mut results = Vec::with_capacity(done.len());
            for (key, p) in done {
                // Taken only once the server confirms every chunk's ack.
                let acks =
                    futures::future::join_all(p.chunks.values().map(|c| c.message.double_ack()))
                        .await;
                let ok = acks.iter().all(Result::is_ok);
                results.push((key, p, ok));
            }
            results
        });
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
    names: RunNames,
    network_hash: String,
    kept: VecDeque<String>,
}

impl std::fmt::Debug for NatsWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsWeights").field("kept", &self.kept).finish_non_exhaustive()
    }
}

impl WeightSink for NatsWeights {
    fn publish(&mut self, version: u64, bytes: &[u8]) -> Result<(), TransportError> {
        let name = format!("weights-v{version:012}");
        let latest = Latest {
            version,
            name: name.clone(),
            sha256: hex::encode(Sha256::digest(bytes)),
            size: bytes.len(),
            network_hash: self.network_hash.clone(),
        };
        let record =
            serde_json::to_vec(&latest).map_err(|e| TransportError::Invalid(e.to_string()))?;
        let (l, n) = (self.link.clone(), self.names.clone());
        let data = bytes.to_vec();
        self.kept.push_back(name.clone());
        let old: Vec<String> = if self.kept.len() > WEIGHT_VERSIONS_KEPT {
            self.kept.drain(..self.kept.len() - WEIGHT_VERSIONS_KEPT).collect()
        } else {
            Vec::new()
        };
        self.link.block_on(async move {
            let store = l.objects(&n).await?;
            store
                .put(name.as_str(), &mut data.as_slice())
                .await
                .map_err(|e| nats_err(&format!("storing weights v{version}"), e))?;
            let kv = l.kv(&n).await?;
            kv.put("latest", record.into())
                .await
                .map_err(|e| nats_err("announcing the latest weights", e))?;
            for o in old {
                let _ = store.delete(o.as_str()).await;
            }
            Ok(())
        })
    }
}

// ---------------------------------------------------------------- collector --

/// A collector's view of a run on a NATS server.
#[derive(Debug)]
pub struct NatsCollector {
    link: Link,
    names: RunNames,
    record: RunRecord,
}

impl NatsCollector {
    /// Joins run `run`: reads its record (the run must exist: the trainer creates it).
    pub fn join(link: Link, run: &str, wait: Duration) -> Result<Self, TransportError> {
        let names = RunNames::new(run)?;
        let (l, n) = (link.clone(), names.clone());
        let record = link.block_on(async move {
            let deadline = Instant::now() + wait;
            loop {
                let attempt = async {
                    let kv = l.kv(&n).await?;
                    let v =
                        kv.get("run").await.map_err(|e| nats_err("reading the run record", e))?;
                    v.ok_or_else(|| TransportError::NoRun {
                        run: n.run.clone(),
                        url: l.url.clone(),
                        message: "no run record (is its trainer started?)".into(),
                    })
                };
                match attempt.await {
                    Ok(b) => {
                        return serde_json::from_slice::<RunRecord>(&b).map_err(|e| {
                            TransportError::Invalid(format!(
                                "run {}: unreadable run record: {e}",
                                n.run
                            ))
                        })
                    }
                    Err(e @ TransportError::NoRun { .. }) if Instant::now() < deadline => {
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        })?;
        Ok(Self { link, names, record })
    }

    /// The run's record (its config among others).
    pub fn record(&self) -> &RunRecord {
        &self.record
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
        let (l, n) = (self.link.clone(), self.names.clone());
        self.link.block_on(async move {
            let kv = l.kv(&n).await?;
            let key = format!("incarnation.{id}");
            for _ in 0..100 {
                let entry = kv
                    .entry(key.as_str())
                    .await
                    .map_err(|e| nats_err("reading an incarnation", e))?;
                let (next, rev) = match &entry {
                    Some(e) if e.operation == kv::Operation::Put => {
                        let n: u32 = std::str::from_utf8(&e.value)
                            .ok()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0);
                        (n + 1, e.revision)
                    }
                    Some(e) => (0, e.revision),
                    None => (0, 0),
                };
                let value: Bytes = next.to_string().into();
                let r = if rev == 0 {
                    kv.create(key.as_str(), value).await.map(|_| ()).map_err(|e| e.to_string())
                } else {
                    kv.update(key.as_str(), value, rev).await.map(|_| ()).map_err(|e| e.to_string())
                };
                if r.is_ok() {
                    return Ok(next);
                }
            }
            Err(nats_err("counting incarnations", "100 concurrent updates in a row"))
        })
    }

    /// Downloads a file from the run's object store.
    pub fn get_object(&self, name: &str) -> Result<Vec<u8>, TransportError> {
        let (l, n) = (self.link.clone(), self.names.clone());
        let name = name.to_string();
        self.link.block_on(async move {
            let store = l.objects(&n).await?;
            let mut o = store
                .get(name.as_str())
                .await
                .map_err(|e| nats_err(&format!("fetching {name}"), e))?;
            let mut out = Vec::new();
            o.read_to_end(&mut out).await.map_err(|e| nats_err(&format!("reading {name}"), e))?;
            Ok(out)
        })
    }

    /// The chunk sink of collector `id` in `incarnation`.
    pub fn chunk_sink(
        &self,
        id: u32,
        incarnation: u32,
        layout: ChunkLayout,
        block: Option<Duration>,
    ) -> NatsChunkSink {
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
        }
    }

    /// The weight source of this run (a watch on the `latest` record).
    pub fn weight_source(&self) -> Result<NatsWeightSource, TransportError> {
        let (tx, rx) = tokio::sync::watch::channel::<Option<Latest>>(None);
        // The task holds no `Link`: the runtime must never be dropped from inside itself.
        let (js, n) = (self.link.js.clone(), self.names.clone());
        let watcher = self.link.rt.spawn(async move {
            loop {
                let watched = async {
                    let kv = js
                        .get_key_value(&n.kv)
                        .await
                        .map_err(|e| nats_err("opening the run's bucket", e))?;
                    if let Ok(Some(v)) = kv.get("latest").await {
                        if let Ok(latest) = serde_json::from_slice::<Latest>(&v) {
                            let _ = tx.send(Some(latest));
                        }
                    }
                    let mut w = kv
                        .watch("latest")
                        .await
                        .map_err(|e| nats_err("watching the weights", e))?;
                    while let Some(e) = w.next().await {
                        let Ok(e) = e else { break };
                        if let Ok(latest) = serde_json::from_slice::<Latest>(&e.value) {
                            let newer =
                                tx.borrow().as_ref().is_none_or(|c| latest.version > c.version);
                            if newer {
                                let _ = tx.send(Some(latest));
                            }
                        }
                    }
                    Ok::<_, TransportError>(())
                };
                let _ = watched.await;
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Ok(NatsWeightSource {
            link: self.link.clone(),
            names: self.names.clone(),
            rx,
            watcher,
            failed: None,
        })
    }
}

/// A collector's chunk sink over NATS.
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
}

fn stream_full(message: &str) -> bool {
    let m = message.to_lowercase();
    m.contains("maximum bytes") || m.contains("maximum messages") || m.contains("resource limits")
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
        let seq = header.trajectory & ((1 << 40) - 1);
        let id = format!("{}.{}.{}.{seq}.{chunk}", self.run, header.collector, self.incarnation);
        let mut headers = HeaderMap::new();
        headers.insert(H_POLICY_VERSION, header.policy_version.to_string().as_str());
        headers.insert(H_SEQ, self.seq.to_string().as_str());
        headers.insert(H_SCHEMA, self.schema.as_str());
        headers.insert(H_BYTE_ORDER, "le");
        let mut waited_full = false;
        loop {
            let js = self.link.js.clone();
            let (subject, p, h, mid) =
                (self.subject.clone(), payload.clone(), headers.clone(), id.clone());
            let r = self.link.block_on(async move {
                let publish = jetstream::message::PublishMessage::build()
                    .payload(p)
                    .headers(h)
                    .message_id(mid);
                let ack = js.send_publish(subject, publish).await.map_err(|e| e.to_string())?;
                ack.await.map_err(|e| e.to_string())
            });
            match r {
                Ok(_) => {
                    self.seq += 1;
                    self.stats.chunks += 1;
                    return Ok(Sent::Stored);
                }
                Err(m) if stream_full(&m) => {
                    if self.block.is_none() {
                        self.seq += 1;
                        self.stats.dropped += 1;
                        return Ok(Sent::Dropped);
                    }
                    if !waited_full {
                        self.stats.full_waits += 1;
                        waited_full = true;
                    }
                }
                Err(m) if m.to_lowercase().contains("permissions violation") => {
                    return Err(TransportError::Auth { url: self.link.url.clone(), message: m });
                }
                Err(_) => self.stats.retries += 1,
            }
            if !keep_waiting() {
                return Ok(Sent::Abandoned);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stats(&self) -> SinkStats {
        self.stats
    }
}

/// A collector's weight source over NATS.
pub struct NatsWeightSource {
    link: Link,
    names: RunNames,
    rx: tokio::sync::watch::Receiver<Option<Latest>>,
    watcher: tokio::task::JoinHandle<()>,
    failed: Option<(u64, Instant)>,
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
}

impl WeightSource for NatsWeightSource {
    fn wait_newer(
        &mut self,
        current: Option<u64>,
        out: &mut Vec<u8>,
        timeout: Duration,
    ) -> Result<Option<u64>, TransportError> {
        let mut rx = self.rx.clone();
        let failed = self.failed;
        let newer = move |l: &Option<Latest>| {
            l.as_ref()
                .filter(|l| {
                    current.is_none_or(|c| l.version > c)
                        && failed.is_none_or(|(v, at)| {
                            v != l.version || at.elapsed() > Duration::from_secs(1)
                        })
                })
                .cloned()
        };
        let latest = self.link.block_on(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                if let Some(l) = newer(&rx.borrow()) {
                    return Some(l);
                }
                match tokio::time::timeout_at(deadline, rx.changed()).await {
                    Ok(Ok(())) => {}
                    _ => return None,
                }
            }
        });
        let Some(latest) = latest else { return Ok(None) };
        let (l, n, name) = (self.link.clone(), self.names.clone(), latest.name.clone());
        let fetched = self.link.block_on(async move {
            let fetch = async {
                let store = l.objects(&n).await?;
                let mut o = store
                    .get(name.as_str())
                    .await
                    .map_err(|e| nats_err(&format!("fetching {name}"), e))?;
                let mut buf = Vec::new();
                o.read_to_end(&mut buf)
                    .await
                    .map_err(|e| nats_err(&format!("reading {name}"), e))?;
                Ok::<_, TransportError>(buf)
            };
            tokio::time::timeout(FETCH_TIMEOUT, fetch).await.unwrap_or_else(|_| {
                Err(nats_err(
                    "fetching weights",
                    format!("no complete snapshot within {} s", FETCH_TIMEOUT.as_secs()),
                ))
            })
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
                return Ok(Some(latest.version));
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(p) = problem {
            eprintln!(
                "[rulka transport] weights v{}: {p}; keeping the current weights",
                latest.version
            );
            self.failed = Some((latest.version, Instant::now()));
        }
        Ok(None)
    }
}
