//! The NATS JetStream transport, for collectors on other machines.
//!
//! Per run `R` (a name of `[A-Za-z0-9_-]`):
//!
//! - **Trajectories**: stream `RULKA_TRAJ_R` on subjects `rulka.R.traj.<collector>`,
//!   file storage, work-queue retention, capped at `stream_max_bytes` with
//!   `discard: new` — a full stream refuses chunks, which is back-pressure on
//!   the collectors (they wait, or drop and count, per `collectors.backpressure`).
//!   Every chunk (the [`rulka_shm::encode_chunk`] record, little-endian) carries the
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
//!   incarnation, host, pid, chunks delivered and held, weights, its game's
//!   counters) every [`ALIVE_EVERY`], and at once when its game's counters
//!   change; the trainer reads them ([`RemoteCollectors`]).
//!
//! Nothing waits without a deadline: every call on a [`NatsLink`] ends within
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

mod chunks;
mod collector;
mod link;
mod rollouts;
mod trainer;
mod weights;

pub use chunks::NatsChunkSink;
pub use collector::NatsCollector;
pub use link::{NatsLink, NatsLinkStatus};
pub use rollouts::NatsRollouts;
pub use trainer::{NatsTrainer, RemoteCollectors, StreamLimits};
pub use weights::{NatsWeightSource, NatsWeights};

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream;
use rulka_shm::ChunkLayout;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::TransportError;
use link::next_count;

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
pub struct NatsRunNames {
    /// The run.
    pub run: String,
    /// Trajectory stream.
    pub stream: String,
    /// Key-value bucket (run record, latest weights, incarnations).
    pub kv: String,
    /// Object store (weights, maps).
    pub objects: String,
}

impl NatsRunNames {
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
pub struct LatestWeights {
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

impl LatestWeights {
    /// Whether this record announces weights a collector holding
    /// `(epoch, version)` should take: a later trainer incarnation, or a
    /// higher version of the same one.
    pub fn supersedes(&self, held: Option<(u64, u64)>) -> bool {
        held.is_none_or(|(e, v)| self.epoch > e || (self.epoch == e && self.version > v))
    }
}

/// What a collector says about itself every [`ALIVE_EVERY`] (key `alive.<id>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectorAlive {
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
