//! How trajectories and weight snapshots travel between collectors and the
//! trainer — one small interface, two implementations:
//!
//! ```text
//!  collector ──ChunkSink──▶ transport ──RolloutSource──▶ trainer
//!  collector ◀─WeightSource── transport ◀──WeightSink──── trainer
//! ```
//!
//! - shared memory on one machine ([`ShmChunkSink`], [`ShmRollouts`],
//!   [`ShmWeightSink`], [`ShmWeightSource`]: one ring per collector, the
//!   weight board) — the default, crash-safe, no server.
//! - NATS JetStream for collectors on other machines (game PCs;
//!   [`NatsLink`], [`NatsTrainer`], [`NatsCollector`]): trajectory chunks in
//!   a work-queue stream with server-side de-duplication and explicit
//!   acknowledgement, weight snapshots in an object store with a "latest"
//!   record collectors watch. [`LocalNatsServer`] starts a local
//!   `nats-server` when no URL is configured; [`Proxy`] is a TCP relay that
//!   the fault tests cut and hang.
//!
//! A chunk is the record of [`rulka_shm::encode_chunk`]: consecutive steps of one
//! trajectory. The trainer sees whole trajectories, each once.
//!
//! ```
//! use std::time::Duration;
//! use rulka_shm::{ChunkHeader, ChunkLayout, Steps};
//! use rulka_transport::{ChunkSink, RolloutSource, ShmChunkSink, ShmRollouts};
//!
//! let dir = tempfile::tempdir()?;
//! let layout = ChunkLayout { frame_len: 1, n_floats: 2, n_heads: 1, n_ingredients: 1, max_steps: 4 };
//! let spec = rulka_shm::RingSpec::new(dir.path(), "ring0", 1, layout.schema(), 8, layout.max_record());
//! let mut trainer_end = ShmRollouts::new(vec![rulka_shm::RingConsumer::create(&spec)?], layout);
//! let producer = rulka_shm::RingProducer::attach(&spec, Duration::from_secs(1),
//!     rulka_shm::Backpressure::DropOldest)?;
//! let mut collector_end = ShmChunkSink::new(producer, layout);
//! let steps = Steps { frames: vec![0; 2], floats: vec![0.5; 4], actions: vec![0, 3],
//!     log_probs: vec![-1.0; 2], values: vec![0.0; 2], ingredients: vec![0.0; 2], flags: vec![0, 2] };
//! let header = ChunkHeader { collector: 0, trajectory: 0, group: 7, policy_version: 1, first_step: 0, is_last: true };
//! collector_end.send(&header, &steps, &mut || true)?;
//! let mut got = Vec::new();
//! trainer_end.poll(&mut got, Duration::from_secs(1))?;
//! assert_eq!((got.len(), got[0].group, got[0].steps.len()), (1, 7, 2));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod nats;
mod proxy;
#[cfg(unix)]
mod server;
#[cfg(unix)]
mod shm;

pub use nats::{
    schema_hash, transfer_deadline, CollectorAlive, LatestWeights, NatsChunkSink, NatsCollector,
    NatsLink, NatsLinkStatus, NatsOptions, NatsRollouts, NatsRunNames, NatsTrainer,
    NatsWeightSource, NatsWeights, RemoteCollectors, RunRecord, StreamLimits, TlsOptions,
    ALIVE_EVERY, API_DEADLINE, CHUNK_DEADLINE, H_BYTE_ORDER, H_POLICY_VERSION, H_SCHEMA, H_SEQ,
    POLL_SLACK, UNREACHABLE_REMINDER, WEIGHT_VERSIONS_KEPT,
};
pub use proxy::Proxy;
#[cfg(unix)]
pub use server::{find_nats_server, LocalNatsServer, NatsServerEvent, NatsServerSpec, NatsUsers};
#[cfg(unix)]
pub use shm::{ShmChunkSink, ShmRollouts, ShmWeightSink, ShmWeightSource};

use std::time::Duration;

use rulka_shm::{ChunkHeader, ShmError, Steps, Trajectory};

/// Errors at the transport boundary; callers branch on the variant.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Shared memory failed.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// The peer on the other end (the trainer's ring consumer) is gone.
    #[error("the trainer (the other end of the transport) is gone")]
    PeerGone,
    /// The NATS server refused the credentials.
    #[error("NATS at {url}: authorization failed ({message}); check transport.nats.token / user / password")]
    Auth {
        /// Server URL.
        url: String,
        /// The server's or client's words.
        message: String,
    },
    /// TLS is required by one side and not offered, or the handshake failed.
    #[error("NATS at {url}: TLS: {message}")]
    Tls {
        /// Server URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// The run's record schema or network differs from this process's.
    #[error("schema mismatch with run {run}: {what} is {theirs} on the trainer, {ours} here (same rulka version and config on both sides?)")]
    SchemaMismatch {
        /// The run.
        run: String,
        /// What differs (record schema, network hash…).
        what: String,
        /// The run's value.
        theirs: String,
        /// This process's value.
        ours: String,
    },
    /// A NATS operation failed (connection, JetStream API…).
    #[error("NATS {op}: {message}")]
    Nats {
        /// What was being done.
        op: String,
        /// Why.
        message: String,
    },
    /// A weight snapshot or record that is not valid.
    #[error("{0}")]
    Invalid(String),
    /// No answer within the operation's deadline (the server or the network
    /// is slow or gone); the operation may be retried.
    #[error("NATS {op} on {url}: no answer within {:.1} s (timed out)", after.as_secs_f64())]
    Timeout {
        /// What was being done.
        op: String,
        /// Server URL.
        url: String,
        /// The deadline that passed.
        after: Duration,
    },
    /// The connection is down (the client is reconnecting); the operation was
    /// not attempted.
    #[error("NATS {op}: {url} unreachable for {:.0} s (reconnecting)", down_for.as_secs_f64())]
    Unreachable {
        /// What was to be done.
        op: String,
        /// Server URL.
        url: String,
        /// How long the connection has been down.
        down_for: Duration,
    },
    /// The run does not exist (yet) on the server.
    #[error("run {run} not found on {url}: {message}")]
    NoRun {
        /// The run's name.
        run: String,
        /// Server URL.
        url: String,
        /// Details.
        message: String,
    },
}

impl TransportError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        use rulka_error::ErrorKind as K;
        match self {
            Self::Shm(e) => e.kind(),
            Self::Auth { .. }
            | Self::Tls { .. }
            | Self::SchemaMismatch { .. }
            | Self::NoRun { .. } => K::BadInput,
            Self::PeerGone
            | Self::Nats { .. }
            | Self::Timeout { .. }
            | Self::Unreachable { .. } => K::Unavailable,
            Self::Invalid(_) => K::Corrupt,
        }
    }
}

impl TransportError {
    /// Whether the error comes from what the user gave (credentials, TLS
    /// settings, a run name, a build that does not match the run), so a
    /// command-line tool reports it as bad input (exit 2) rather than a failure.
    pub fn is_bad_input(&self) -> bool {
        self.kind() == rulka_error::ErrorKind::BadInput
    }

    /// Whether the error says the server or the network is (for now) not
    /// answering — a timeout, a connection that is down, a failed request —
    /// so that waiting and retrying is the remedy.
    pub fn is_connection(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::Unreachable { .. } | Self::Nats { .. })
    }
}

/// How a chunk send ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The transport holds it durably (shm: committed; NATS: stored by the server).
    Stored,
    /// Back-pressure dropped something (shm drop-oldest: an older record;
    /// NATS drop policy: this chunk, so its trajectory stays incomplete).
    Dropped,
    /// Waiting on back-pressure was cut short by the caller (`keep_waiting`
    /// returned false); the chunk was not sent.
    Abandoned,
    /// The server is out of reach: the chunk is kept in the sender's bounded
    /// outbox and delivered, in order, once the server answers again.
    Queued,
}

/// Counters of a collector's chunk sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Chunks stored.
    pub chunks: u64,
    /// Times a full transport made the sender wait.
    pub full_waits: u64,
    /// Chunks dropped by back-pressure.
    pub dropped: u64,
    /// Sends retried after a connection problem (NATS).
    pub retries: u64,
    /// Chunks held in the outbox now, waiting for the server (NATS).
    pub queued: u64,
    /// Their bytes.
    pub queued_bytes: u64,
    /// Whole trajectories dropped from a full outbox (NATS: the server was
    /// out of reach for longer than the outbox holds).
    pub outbox_dropped: u64,
}

/// Collector side: where trajectory chunks go.
pub trait ChunkSink: Send {
    /// Sends one chunk of `steps` (validated: non-finite values, sizes).
    /// While back-pressure makes it wait, it calls `keep_waiting` between
    /// attempts (a heartbeat and a stop check); `false` abandons the send.
    fn send(
        &mut self,
        header: &ChunkHeader,
        steps: &Steps,
        keep_waiting: &mut dyn FnMut() -> bool,
    ) -> Result<Sent, TransportError>;

    /// Counters so far.
    fn stats(&self) -> SinkStats;

    /// Takes the collector's game counters, for the trainer (NATS: in the
    /// collector's `alive.<id>` record). Sinks without a channel for them
    /// ignore them.
    fn report_game(&mut self, game: rulka_config::GameCounters) {
        let _ = game;
    }

    /// Tries for up to `limit` to deliver what the sink still holds (a NATS
    /// outbox); returns the chunks still undelivered. Sinks that hold
    /// nothing return 0 at once.
    fn flush(&mut self, limit: Duration) -> u64 {
        let _ = limit;
        0
    }
}

/// Collector side: where new weight snapshots come from.
pub trait WeightSource: Send {
    /// Waits up to `timeout` for a snapshot newer than `current` (any, when
    /// `None`), copies its bytes (a rulka safetensors file) into `out` and
    /// returns its version; `Ok(None)` when none came. Versions returned never
    /// go backwards within one trainer incarnation; a source that knows the
    /// trainer's incarnation (NATS: the weight record's `epoch`) returns a
    /// resumed trainer's snapshots even when their versions are lower than
    /// the crashed one's, and then compares with what it returned itself.
    fn wait_newer(
        &mut self,
        current: Option<u64>,
        out: &mut Vec<u8>,
        timeout: Duration,
    ) -> Result<Option<u64>, TransportError>;
}

/// Counters of a trainer's rollout source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Incomplete trajectories discarded (their collector died or restarted).
    pub incomplete_dropped: u64,
    /// Chunks that fit no trajectory.
    pub orphan_chunks: u64,
    /// Records dropped by back-pressure before the trainer read them.
    pub dropped: u64,
    /// Chunks delivered again (or resent) and ignored: their trajectory was
    /// already taken or the chunk already held.
    pub repeats_ignored: u64,
    /// Chunks refused (another schema, undecodable).
    pub rejected: u64,
}

/// Trainer side: where whole trajectories come from.
pub trait RolloutSource {
    /// Appends the trajectories completed since the last call to `out`,
    /// waiting up to `timeout` when none is ready. A trajectory returned is
    /// never returned again by this source; whether a later one (a restarted
    /// trainer's) gets it again is [`commit`](Self::commit)'s to decide.
    fn poll(&mut self, out: &mut Vec<Trajectory>, timeout: Duration) -> Result<(), TransportError>;

    /// Acknowledges every trajectory [`poll`](Self::poll) returned so far:
    /// the trainer calls it once it has recorded them. Over NATS one not yet
    /// acknowledged when the trainer dies is delivered again to the next
    /// trainer (which finds it in `trajectories.csv`: recorded once, never
    /// lost); one whose acknowledgement fails is tried again at the next
    /// call. Shared memory: nothing to do (a record popped from a ring is
    /// gone, and the collectors end with their trainer).
    fn commit(&mut self) -> Result<(), TransportError> {
        Ok(())
    }

    /// The collectors stopped: trajectories still incomplete will not be
    /// completed and count as incomplete.
    fn finish(&mut self);

    /// `(collector, trajectory)` of the incomplete trajectories dropped since
    /// the last call (their collector died, restarted, or moved on after its
    /// game failed mid-run): begun, never to be whole — not missing.
    fn take_abandoned(&mut self) -> Vec<(u32, u64)> {
        Vec::new()
    }

    /// Counters so far.
    fn stats(&self) -> SourceStats;
}

/// Trainer side: where weight snapshots go.
pub trait WeightSink: Send {
    /// Publishes snapshot `version` (a rulka safetensors file's bytes);
    /// versions increase.
    fn publish(&mut self, version: u64, bytes: &[u8]) -> Result<(), TransportError>;
}

/// Little-endian hosts only: the chunk columns travel in host byte order.
pub const fn host_is_little_endian() -> bool {
    cfg!(target_endian = "little")
}
