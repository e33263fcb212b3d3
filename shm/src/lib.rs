//! Crash-safe shared memory between rulka processes: **rollout rings**
//! (collector → learner, one ring per collector) and the **weight board**
//! (learner → collectors).
//!
//! # Design: no lock is held across a write
//!
//! The Python original shared weights under a process lock; a process dying
//! while holding it stalled everything. A robust mutex repairs ownership but
//! not the half-written data behind it, and needs careful timed locking
//! everywhere. rulka instead uses commit protocols in which a process can die
//! at any instruction without blocking anyone or exposing partial data:
//!
//! - **Rings** ([`RingConsumer`], [`RingProducer`]) are single-producer/single-consumer. A record is
//!   written into its slot, the slot's sequence word is set, and only then is
//!   `head` advanced (Release) — the commit. The consumer copies a record,
//!   re-checks the slot's sequence word, and claims it by CAS on `tail`.
//!   A killed producer leaves `head` at its last commit: nothing partial is
//!   visible and nothing committed is lost. A restarted producer resumes at
//!   `head`. Back-pressure is [`Backpressure::Block`] (with a timeout
//!   and a waiting-time counter) or [`Backpressure::DropOldest`]
//!   (counted); memory never grows.
//! - **The board** ([`BoardWriter`], [`BoardReader`]) is two slots plus a generation counter: the
//!   writer fills the non-current slot and advances the generation; readers
//!   copy the current slot and validate its sequence word and a checksum
//!   computed during the copy. Readers never block the writer; a writer killed
//!   mid-publish leaves the previous snapshot current.
//!
//! Locks exist only for *exclusivity and liveness*, as `flock(2)` lock files
//! ([`ProcessLock`]) that the kernel releases when the holder dies: one owner per
//! segment, one producer per ring, one consumer, one board writer. A dead
//! peer is therefore seen at once ([`Liveness::Dead`]), and a lock
//! cannot outlive its holder.
//!
//! Segments ([`Segment`]) are files on a tmpfs (`/dev/shm`) with a header —
//! magic, layout version, kind, run id, creator pid, record schema — and an
//! initialisation barrier: openers wait for the creator's Release of READY
//! and get [`ShmError::InitializationNotYetFinalized`] if it never comes;
//! another layout is [`ShmError::VersionMismatch`], another schema
//! [`ShmError::SchemaMismatch`]. The owner re-attaches a segment of its own
//! run whose previous owner died (a restarted learner keeps the collectors'
//! rings), and replaces anything else stale. Sizes are reserved with
//! `posix_fallocate`, so a full `/dev/shm` fails creation instead of raising
//! SIGBUS later.
//!
//! Shared bytes are copied with plain (non-atomic) memory copies validated by
//! sequence words, the seqlock pattern; every atomic comes from one module, re-exported here ([`AtomicU64`],
//! [`AtomicU32`], [`Ordering`], [`fence`]) for the whole workspace.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use rulka_shm::{Backpressure, BoardReader, BoardSpec, BoardWriter, RingConsumer, RingProducer, RingSpec, Schema};
//!
//! let dir = tempfile::tempdir()?;
//! let spec = RingSpec::new(dir.path(), "demo-ring-0", 7, Schema::default(), 8, 1024);
//! let mut learner_end = RingConsumer::create(&spec)?;
//! let mut collector_end = RingProducer::attach(&spec, Duration::from_secs(1), Backpressure::DropOldest)?;
//! collector_end.push(&[b"step ", b"data"])?;
//! let mut buf = Vec::new();
//! assert!(learner_end.pop(&mut buf));
//! assert_eq!(buf, b"step data");
//!
//! let bspec = BoardSpec::new(dir.path(), "demo-board", 7, Schema::default(), 1 << 20);
//! let mut writer = BoardWriter::create(&bspec)?;
//! let reader = BoardReader::open(&bspec, Duration::from_secs(1))?;
//! writer.publish(1, b"weights v1")?;
//! let info = reader.read(&mut buf).expect("published");
//! assert_eq!((info.version, buf.as_slice()), (1, &b"weights v1"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(unix)]
mod board;
mod chunk;
#[cfg(unix)]
mod gc;
#[cfg(windows)]
mod job;
#[cfg(unix)]
mod lock;
#[cfg(unix)]
mod process;
#[cfg(unix)]
mod ring;
mod schema;
#[cfg(unix)]
mod segment;
mod signal;
mod sync;

#[cfg(unix)]
pub use board::{BoardReader, BoardSpec, BoardWriter, SnapshotInfo};
#[cfg(unix)]
pub use chunk::write_chunk;
pub use chunk::{
    encode_chunk, read_chunk, ChunkHeader, ChunkLayout, Reassembler, ReassemblyStats, Steps,
    Trajectory, TrajectoryId,
};
#[cfg(unix)]
pub use gc::{
    collect_stale, is_run_dir_name, process_start_time, write_owner, RunShmDir, RunShmOwner,
    RunShmVerdict, OWNER_FILE, UNOWNED_GRACE,
};
#[cfg(windows)]
pub use job::Job;
#[cfg(unix)]
pub use lock::{attached_peers, probe_lock, Liveness, Peer, ProcessLock};
#[cfg(unix)]
pub use process::{
    become_subreaper, descendants, process_alive, processes_matching, reap_exited_children,
    send_signal, SIGKILL, SIGTERM,
};
#[cfg(unix)]
pub use ring::{Backpressure, RingConsumer, RingProducer, RingSpec, RingStats};
pub use schema::{Dtype, Field, Schema, SegmentKind, SCHEMA_CAPACITY};
#[cfg(unix)]
pub use segment::{Segment, SegmentOrigin, SegmentSpec, HEADER_SIZE, LAYOUT_VERSION, MAGIC};
pub use signal::{
    exit_now, install_stop_handler, last_stop_signal, lower_this_threads_priority, request_stop,
    stop_cleanup_done, stop_requests,
};
#[cfg(unix)]
pub use signal::{exit_with_parent, tie_to_this_thread};
pub use sync::{fence, AtomicU32, AtomicU64, Ordering};

use std::path::PathBuf;
use std::time::Duration;

/// Every failure a caller of this crate may branch on.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// File system error on a segment or lock file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// No such segment (the trainer has not created it, or has removed it).
    #[error("{path}: no such shared-memory segment (is the trainer running?)")]
    NotFound {
        /// The segment file.
        path: PathBuf,
    },
    /// A live process holds the lock (segment owner, ring producer or consumer, board writer).
    #[error("{path}: held by live process {pid}")]
    LockHeld {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid (0 if unknown).
        pid: u32,
    },
    /// The segment's creator has not finished initialising it (or died doing so).
    #[error("{path}: not initialised by its creator (pid {creator_pid}) in time")]
    InitializationNotYetFinalized {
        /// The segment file.
        path: PathBuf,
        /// Pid of the creator.
        creator_pid: u32,
    },
    /// The segment was made by a build with another layout.
    #[error("{path}: layout version {found}, this build uses {expected}")]
    VersionMismatch {
        /// The segment file.
        path: PathBuf,
        /// Layout version in the segment.
        found: u32,
        /// This build's.
        expected: u32,
    },
    /// The segment holds records of another schema (e.g. another image size).
    #[error("{path}: record schema differs: segment has {found}, expected {expected}")]
    SchemaMismatch {
        /// The segment file.
        path: PathBuf,
        /// Schema in the segment.
        found: String,
        /// Schema asked for.
        expected: String,
    },
    /// The schema does not fit the header.
    #[error("record schema of {len} bytes exceeds {max} {reason}")]
    SchemaTooLarge {
        /// Encoded length.
        len: usize,
        /// Capacity.
        max: usize,
        /// Encoder message, if any.
        reason: String,
    },
    /// Not a valid segment (bad magic, wrong size or kind).
    #[error("{path}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The tmpfs has no room for the segment.
    #[error(
        "{path}: no space for {needed} bytes of shared memory (is /dev/shm full or too small?)"
    )]
    NoSpace {
        /// The segment file.
        path: PathBuf,
        /// Bytes needed.
        needed: usize,
    },
    /// A record larger than the ring's slots or the board's capacity; nothing written.
    #[error("record of {len} bytes exceeds the maximum {max}")]
    RecordTooLarge {
        /// Record length.
        len: usize,
        /// Maximum.
        max: usize,
    },
    /// An empty record or trajectory chunk; nothing written.
    #[error("empty record")]
    EmptyRecord,
    /// The ring stayed full for the whole blocking timeout.
    #[error("ring full: the consumer did not make room within {waited:?}")]
    RingFull {
        /// Time spent waiting.
        waited: Duration,
    },
    /// A board version not newer than the current one.
    #[error("snapshot version {version} is not newer than the current {current}")]
    VersionNotNewer {
        /// Offered version.
        version: u64,
        /// Current version.
        current: u64,
    },
    /// A chunk's columns do not match its step count.
    #[error("chunk field {field}: expected {expected} values, found {found}")]
    InvalidChunk {
        /// Column.
        field: &'static str,
        /// Expected length.
        expected: usize,
        /// Actual length.
        found: usize,
    },
    /// NaN or infinity in a chunk; nothing written.
    #[error("non-finite value in chunk field {field} at step {step}")]
    NonFinite {
        /// Column.
        field: &'static str,
        /// Step index within the chunk.
        step: usize,
    },
}

impl ShmError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        use rulka_error::ErrorKind as K;
        match self {
            Self::LockHeld { .. } | Self::VersionMismatch { .. } | Self::SchemaMismatch { .. } => {
                K::BadInput
            }
            Self::NotFound { .. } | Self::InitializationNotYetFinalized { .. } => K::Unavailable,
            Self::Corrupt { .. } | Self::InvalidChunk { .. } | Self::NonFinite { .. } => K::Corrupt,
            Self::Io { .. }
            | Self::SchemaTooLarge { .. }
            | Self::NoSpace { .. }
            | Self::RecordTooLarge { .. }
            | Self::EmptyRecord
            | Self::RingFull { .. }
            | Self::VersionNotNewer { .. } => K::Failed,
        }
    }
}
