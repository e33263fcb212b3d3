//! Named shared-memory segments: a file on a tmpfs (`/dev/shm` by default),
//! mapped shared, with a header that makes a half-built, foreign or stale
//! segment detectable instead of silently reinterpreted.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use crate::lock::ProcessLock;
use crate::schema::SCHEMA_CAPACITY;
use crate::schema::{Schema, SegmentKind};
use crate::sync::{AtomicU32, Ordering};
use crate::ShmError;

/// `b"RULKASHM"` as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RULKASHM");
/// Version of the header, ring and board layouts. Bump on any layout change.
pub const LAYOUT_VERSION: u32 = 1;
/// Bytes reserved for the header; the payload starts here.
pub const HEADER_SIZE: usize = 4096;

const STATE_READY: u32 = 1;

#[repr(C)]
struct Header {
    magic: u64,
    state: AtomicU32,
    layout_version: u32,
    kind: u32,
    creator_pid: u32,
    run_id: u64,
    total_size: u64,
    payload_size: u64,
    schema_len: u32,
    _pad: u32,
    schema: [u8; SCHEMA_CAPACITY],
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_SIZE);

/// Everything that identifies a segment's contents.
#[derive(Debug, Clone)]
pub struct SegmentSpec {
    /// Directory of the segment files (a tmpfs; `/dev/shm` in production).
    pub dir: PathBuf,
    /// File name, e.g. `rulka-<run>-ring-3`.
    pub name: String,
    /// Ring or board.
    pub kind: SegmentKind,
    /// Training run identity: a same-run segment is re-attached, another run's is stale.
    pub run_id: u64,
    /// Record schema.
    pub schema: Schema,
    /// Payload bytes after the header.
    pub payload_size: usize,
}

impl SegmentSpec {
    /// Path of the segment file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// Path of the owner lock file.
    pub fn owner_lock_path(&self) -> PathBuf {
        self.dir.join(format!("{}.owner", self.name))
    }
}

/// How [`Segment::create`] came by its segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentOrigin {
    /// There was none: created.
    Created,
    /// A valid segment of the same run whose owner had died: re-attached as is.
    Reattached,
    /// A dead run's or an unusable segment was removed and a new one created.
    Replaced {
        /// Why the old one was not reused.
        reason: String,
    },
}

/// A mapped segment. The mapping lives as long as this value.
#[derive(Debug)]
pub struct Segment {
    base: NonNull<u8>,
    len: usize,
    path: PathBuf,
    _file: File,
    owner: Option<ProcessLock>,
    origin: SegmentOrigin,
    /// Set while a new segment lives under its temporary name; `publish_ready`
    /// renames it into place.
    pending: Option<PathBuf>,
}

// SAFETY: the mapping is plain shared memory; all concurrent access to it goes
// through atomics or the seqlock protocols of `ring`/`board`.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` only hands out raw pointers into the mapping.
unsafe impl Sync for Segment {}

fn map(file: &File, len: usize, path: &Path) -> Result<NonNull<u8>, ShmError> {
    // SAFETY: mapping `len` bytes of a regular file we hold open, shared, read-write.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(ShmError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::last_os_error(),
        });
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| ShmError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other("mmap returned null"),
    })
}

impl Segment {
    /// Creates the segment as its owner (the learner), holding the owner lock
    /// for this value's lifetime.
    ///
    /// - A live owner elsewhere → [`ShmError::LockHeld`] (nothing touched).
    /// - A valid segment of the same `run_id`, layout and schema whose owner
    ///   died → re-attached as is ([`SegmentOrigin::Reattached`]): a restarted learner
    ///   keeps the collectors' rings and the last snapshot.
    /// - Anything else (another run, another layout or schema, half-initialised)
    ///   → removed and created anew ([`SegmentOrigin::Replaced`]).
    ///
    /// The full size is reserved with `posix_fallocate`, so a full `/dev/shm`
    /// is [`ShmError::NoSpace`] here, never a SIGBUS later.
    pub fn create(spec: &SegmentSpec) -> Result<Self, ShmError> {
        let owner = ProcessLock::acquire(&spec.owner_lock_path())?;
        let path = spec.path();
        remove_stale_temps(spec);
        let mut replaced = None;
        if path.exists() {
            match Self::open_existing(spec, Duration::ZERO) {
                Ok(mut seg) => {
                    let run_id = seg.header().run_id;
                    if run_id == spec.run_id {
                        seg.owner = Some(owner);
                        seg.origin = SegmentOrigin::Reattached;
                        return Ok(seg);
                    }
                    replaced =
                        Some(format!("it belongs to run {run_id:#x}, not {:#x}", spec.run_id));
                }
                Err(e) => replaced = Some(e.to_string()),
            }
            std::fs::remove_file(&path)
                .map_err(|source| ShmError::Io { path: path.clone(), source })?;
        }
        let mut seg = Self::create_new(spec)?;
        seg.owner = Some(owner);
        seg.origin = match replaced {
            Some(reason) => SegmentOrigin::Replaced { reason },
            None => SegmentOrigin::Created,
        };
        Ok(seg)
    }

    fn create_new(spec: &SegmentSpec) -> Result<Self, ShmError> {
        let final_path = spec.path();
        // Built under a temporary name and renamed into place once READY, so the
        // segment's name never refers to a partially built file.
        let path = spec.dir.join(format!(".{}.init.{}", spec.name, std::process::id()));
        let _ = std::fs::remove_file(&path);
        let io = |source| ShmError::Io { path: path.clone(), source };
        let schema = spec.schema.encode()?;
        let len = HEADER_SIZE + spec.payload_size;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        // SAFETY: posix_fallocate on an open descriptor; reserves the blocks up front.
        let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
        if r != 0 {
            let _ = std::fs::remove_file(&path);
            let source = std::io::Error::from_raw_os_error(r);
            return Err(if r == libc::ENOSPC {
                ShmError::NoSpace { path: final_path, needed: len }
            } else {
                io(source)
            });
        }
        let base = match map(&file, len, &path) {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        let seg = Self {
            base,
            len,
            path: final_path,
            _file: file,
            owner: None,
            origin: SegmentOrigin::Created,
            pending: Some(path),
        };
        let h = seg.header_ptr();
        // SAFETY: freshly created, zero-filled mapping of at least HEADER_SIZE bytes that
        // no other process can use yet (state is still INITIALISING).
        unsafe {
            (*h).magic = MAGIC;
            (*h).layout_version = LAYOUT_VERSION;
            (*h).kind = spec.kind as u32;
            (*h).creator_pid = std::process::id();
            (*h).run_id = spec.run_id;
            (*h).total_size = len as u64;
            (*h).payload_size = spec.payload_size as u64;
            (*h).schema_len = schema.len() as u32;
            (&mut (*h).schema)[..schema.len()].copy_from_slice(&schema);
        }
        Ok(seg)
    }

    /// Marks a created segment ready (the state word goes from 0, initialising,
    /// to READY); openers wait for this. Call after the
    /// payload (ring/board header) is initialised.
    pub(crate) fn publish_ready(&mut self) -> Result<(), ShmError> {
        // SYNC POINT: Release orders every initialising write before READY;
        // openers Acquire-load the state.
        self.header().state.store(STATE_READY, Ordering::Release);
        if let Some(tmp) = self.pending.take() {
            std::fs::rename(&tmp, &self.path)
                .map_err(|source| ShmError::Io { path: self.path.clone(), source })?;
        }
        Ok(())
    }

    /// Opens an existing segment (a collector attaching), waiting up to
    /// `init_timeout` for its creator to finish initialising, and checks
    /// magic, layout version, kind and schema.
    pub fn open(spec: &SegmentSpec, init_timeout: Duration) -> Result<Self, ShmError> {
        Self::open_existing(spec, init_timeout)
    }

    fn open_existing(spec: &SegmentSpec, init_timeout: Duration) -> Result<Self, ShmError> {
        let path = spec.path();
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ShmError::NotFound { path })
            }
            Err(source) => return Err(ShmError::Io { path, source }),
        };
        let len =
            file.metadata().map_err(|source| ShmError::Io { path: path.clone(), source })?.len()
                as usize;
        if len < HEADER_SIZE {
            return Err(ShmError::Corrupt {
                path,
                reason: format!("{len} bytes, shorter than the {HEADER_SIZE}-byte header"),
            });
        }
        let base = map(&file, len, &path)?;
        let seg = Self {
            base,
            len,
            path: path.clone(),
            _file: file,
            owner: None,
            origin: SegmentOrigin::Reattached,
            pending: None,
        };
        let h = seg.header();
        if h.magic != MAGIC {
            return Err(ShmError::Corrupt {
                path,
                reason: "not a rulka segment (bad magic)".into(),
            });
        }
        let start = Instant::now();
        // SYNC POINT: Acquire pairs with publish_ready's Release.
        while h.state.load(Ordering::Acquire) != STATE_READY {
            if start.elapsed() >= init_timeout {
                return Err(ShmError::InitializationNotYetFinalized {
                    path,
                    creator_pid: h.creator_pid,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if h.layout_version != LAYOUT_VERSION {
            return Err(ShmError::VersionMismatch {
                path,
                found: h.layout_version,
                expected: LAYOUT_VERSION,
            });
        }
        if h.kind != spec.kind as u32 {
            return Err(ShmError::Corrupt {
                path,
                reason: format!("segment kind {} is not {:?}", h.kind, spec.kind),
            });
        }
        if h.total_size as usize != len || h.payload_size as usize + HEADER_SIZE != len {
            return Err(ShmError::Corrupt {
                path,
                reason: format!("size {len} does not match the header ({})", h.total_size),
            });
        }
        let stored = &h.schema[..(h.schema_len as usize).min(SCHEMA_CAPACITY)];
        let expected = spec.schema.encode()?;
        if stored != expected.as_slice() {
            return Err(ShmError::SchemaMismatch {
                path,
                found: String::from_utf8_lossy(stored).into_owned(),
                expected: String::from_utf8_lossy(&expected).into_owned(),
            });
        }
        Ok(seg)
    }

    fn header_ptr(&self) -> *mut Header {
        self.base.as_ptr().cast::<Header>()
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_SIZE bytes, page-aligned, and lives
        // as long as `self`; header fields other than `state` are written only
        // before READY is published.
        unsafe { &*self.header_ptr() }
    }

    /// Pointer to the payload (after the header); `payload_len()` bytes.
    pub(crate) fn payload(&self) -> *mut u8 {
        // SAFETY: HEADER_SIZE <= len, checked at open/create.
        unsafe { self.base.as_ptr().add(HEADER_SIZE) }
    }

    /// Payload length in bytes.
    pub fn payload_len(&self) -> usize {
        self.len - HEADER_SIZE
    }

    /// The segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Pid of the process that created the segment.
    pub fn creator_pid(&self) -> u32 {
        self.header().creator_pid
    }

    /// How `create` came by this segment (openers see `Reattached`).
    pub fn origin(&self) -> &SegmentOrigin {
        &self.origin
    }

    /// Removes the segment file and its owner lock (clean shutdown). The
    /// mapping stays valid for processes that still have it.
    pub fn remove(mut self) -> Result<(), ShmError> {
        std::fs::remove_file(&self.path)
            .map_err(|source| ShmError::Io { path: self.path.clone(), source })?;
        if let Some(owner) = self.owner.take() {
            owner.release();
        }
        Ok(())
    }
}

/// Removes temporary files a creator killed mid-initialisation left behind.
fn remove_stale_temps(spec: &SegmentSpec) {
    let prefix = format!(".{}.init.", spec.name);
    if let Ok(entries) = std::fs::read_dir(&spec.dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if let Some(tmp) = self.pending.take() {
            // Never published: nobody else can be using it.
            let _ = std::fs::remove_file(tmp);
        }
        // SAFETY: unmapping exactly the region mapped in `map`; no references into it
        // outlive `self` (the ring/board types borrow or own the Segment).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
