//! The weight-snapshot board: one writer (the learner) publishes versioned
//! byte buffers; any number of readers take the latest complete one without
//! blocking the writer and without torn reads.
//!
//! Two slots and a generation counter: the writer fills the slot that is not
//! current (sequence word odd while writing, even when done), then advances
//! the generation (Release) — the commit. A reader copies the current slot
//! and re-checks its sequence word; if the writer lapped it, it retries. Each
//! snapshot carries a checksum computed in the same pass as the copy, so even
//! a protocol bug could not hand out a torn snapshot. A writer killed
//! mid-publish leaves the generation unchanged: the previous version stays current.

use std::mem::size_of;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::lock::{probe_lock, Liveness, ProcessLock};
use crate::ring::backoff;
use crate::schema::{Schema, SegmentKind};
use crate::segment::{Segment, SegmentOrigin, SegmentSpec};
use crate::sync::{fence, AtomicU64, Ordering};
use crate::ShmError;

#[repr(C, align(64))]
struct BoardHeader {
    generation: AtomicU64,
    capacity: u64,
    _pad: [u8; 48],
}

#[repr(C, align(64))]
struct SlotMeta {
    seq: AtomicU64,
    version: AtomicU64,
    len: AtomicU64,
    checksum: AtomicU64,
    _pad: [u8; 32],
}

/// A snapshot as read from the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The version the writer gave it.
    pub version: u64,
    /// Its length in bytes.
    pub len: usize,
}

/// Shape of a board.
#[derive(Debug, Clone)]
pub struct BoardSpec {
    /// Directory, name, run id, schema.
    pub segment: SegmentSpec,
    /// Largest snapshot in bytes.
    pub capacity: usize,
}

impl BoardSpec {
    /// A board spec holding snapshots of up to `capacity` bytes.
    pub fn new(dir: &Path, name: &str, run_id: u64, mut schema: Schema, capacity: usize) -> Self {
        schema.params.push(("board.capacity".into(), capacity as u64));
        let slot = size_of::<SlotMeta>() + capacity.div_ceil(64) * 64;
        let segment = SegmentSpec {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            kind: SegmentKind::Board,
            run_id,
            schema,
            payload_size: size_of::<BoardHeader>() + 2 * slot,
        };
        Self { segment, capacity }
    }

    fn writer_lock(&self) -> PathBuf {
        self.segment.dir.join(format!("{}.writer", self.segment.name))
    }
}

#[derive(Debug)]
struct BoardMap {
    seg: Segment,
    capacity: usize,
    stride: usize,
}

impl BoardMap {
    fn new(seg: Segment, capacity: usize) -> Result<Self, ShmError> {
        let stride = size_of::<SlotMeta>() + capacity.div_ceil(64) * 64;
        if seg.payload_len() < size_of::<BoardHeader>() + 2 * stride {
            return Err(ShmError::Corrupt {
                path: seg.path().to_path_buf(),
                reason: "board smaller than its schema".into(),
            });
        }
        Ok(Self { seg, capacity, stride })
    }

    fn header(&self) -> &BoardHeader {
        // SAFETY: the payload holds a BoardHeader (checked in `new`); mutable fields are atomic.
        unsafe { &*self.seg.payload().cast::<BoardHeader>() }
    }

    fn slot(&self, i: u64) -> (&SlotMeta, *mut u8) {
        let i = (i % 2) as usize;
        // SAFETY: two slots of `stride` bytes follow the header (checked in `new`).
        unsafe {
            let base = self.seg.payload().add(size_of::<BoardHeader>() + i * self.stride);
            (&*base.cast::<SlotMeta>(), base.add(size_of::<SlotMeta>()))
        }
    }

    fn latest(&self) -> Option<SnapshotInfo> {
        let g = self.header().generation.load(Ordering::Acquire);
        if g == 0 {
            return None;
        }
        let (meta, _) = self.slot(g - 1);
        Some(SnapshotInfo {
            version: meta.version.load(Ordering::Relaxed),
            len: meta.len.load(Ordering::Relaxed) as usize,
        })
    }
}

/// The publishing end (the learner).
#[derive(Debug)]
pub struct BoardWriter {
    map: BoardMap,
    _lock: ProcessLock,
}

impl BoardWriter {
    /// Creates (or, for the same run, re-attaches) the board and returns its writer.
    pub fn create(spec: &BoardSpec) -> Result<Self, ShmError> {
        let lock = ProcessLock::acquire(&spec.writer_lock())?;
        let seg = Segment::create(&spec.segment)?;
        let fresh = !matches!(seg.origin(), SegmentOrigin::Reattached);
        let mut map = BoardMap::new(seg, spec.capacity)?;
        if fresh {
            // SAFETY: not yet READY, so nobody else reads the header.
            unsafe { (*map.seg.payload().cast::<BoardHeader>()).capacity = spec.capacity as u64 };
            map.seg.publish_ready()?;
        }
        Ok(Self { map, _lock: lock })
    }

    /// Publishes `bytes` as `version`. Versions must increase.
    pub fn publish(&mut self, version: u64, bytes: &[u8]) -> Result<(), ShmError> {
        if bytes.len() > self.map.capacity {
            return Err(ShmError::RecordTooLarge { len: bytes.len(), max: self.map.capacity });
        }
        if let Some(prev) = self.map.latest() {
            if version <= prev.version {
                return Err(ShmError::VersionNotNewer { version, current: prev.version });
            }
        }
        let h = self.map.header();
        let g = h.generation.load(Ordering::Relaxed);
        let (meta, data) = self.map.slot(g);
        meta.seq.store(2 * g + 1, Ordering::Relaxed);
        // SYNC POINT: odd sequence visible before the slot's bytes change.
        fence(Ordering::Release);
        // SAFETY: bytes.len() <= capacity, the slot's data size; source is process-local.
        let checksum = unsafe { copy_and_hash(bytes.as_ptr(), data, bytes.len()) };
        meta.version.store(version, Ordering::Relaxed);
        meta.len.store(bytes.len() as u64, Ordering::Relaxed);
        meta.checksum.store(checksum, Ordering::Relaxed);
        // SYNC POINT: even sequence Releases the slot; the generation advance is the commit.
        meta.seq.store(2 * g + 2, Ordering::Release);
        h.generation.store(g + 1, Ordering::Release);
        Ok(())
    }

    /// The latest published snapshot's version and length.
    pub fn latest(&self) -> Option<SnapshotInfo> {
        self.map.latest()
    }

    /// Removes the board's files (clean shutdown).
    pub fn remove(self) -> Result<(), ShmError> {
        let BoardWriter { map, _lock: lock } = self;
        lock.release();
        map.seg.remove()
    }
}

/// A reading end (a collector); any number may exist.
#[derive(Debug)]
pub struct BoardReader {
    map: BoardMap,
    writer_lock: PathBuf,
}

impl BoardReader {
    /// Opens an existing board for reading.
    pub fn open(spec: &BoardSpec, init_timeout: Duration) -> Result<Self, ShmError> {
        let seg = Segment::open(&spec.segment, init_timeout)?;
        Ok(Self { map: BoardMap::new(seg, spec.capacity)?, writer_lock: spec.writer_lock() })
    }

    /// The latest complete snapshot's version and length, without copying.
    pub fn latest(&self) -> Option<SnapshotInfo> {
        self.map.latest()
    }

    /// Copies the latest complete snapshot into `out`; `None` if nothing has
    /// been published. Never returns a torn or partially written snapshot.
    pub fn read(&self, out: &mut Vec<u8>) -> Option<SnapshotInfo> {
        let h = self.map.header();
        loop {
            let g = h.generation.load(Ordering::Acquire);
            if g == 0 {
                return None;
            }
            let (meta, data) = self.map.slot(g - 1);
            let s1 = meta.seq.load(Ordering::Acquire);
            if s1 != 2 * (g - 1) + 2 {
                continue; // the writer lapped us and is refilling this slot
            }
            let len = (meta.len.load(Ordering::Relaxed) as usize).min(self.map.capacity);
            let version = meta.version.load(Ordering::Relaxed);
            let want = meta.checksum.load(Ordering::Relaxed);
            out.clear();
            out.reserve(len);
            // SAFETY: len <= capacity; `out` has room; a racing writer is detected below.
            let got = unsafe {
                let c = copy_and_hash(data, out.as_mut_ptr(), len);
                out.set_len(len);
                c
            };
            // SYNC POINT: payload reads before the sequence re-check.
            fence(Ordering::Acquire);
            if meta.seq.load(Ordering::Relaxed) == s1 && got == want {
                return Some(SnapshotInfo { version, len });
            }
        }
    }

    /// Waits up to `timeout` for a snapshot newer than `version`, then reads it.
    pub fn wait_newer(
        &self,
        version: Option<u64>,
        out: &mut Vec<u8>,
        timeout: Duration,
    ) -> Option<SnapshotInfo> {
        let start = Instant::now();
        loop {
            if let Some(info) = self.latest() {
                if version.is_none_or(|v| info.version > v) {
                    return self.read(out);
                }
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return None;
            }
            backoff(waited);
        }
    }

    /// Whether the board's writer (the learner) is alive.
    pub fn writer(&self) -> Result<Liveness, ShmError> {
        probe_lock(&self.writer_lock)
    }
}

/// Copies `len` bytes from `src` to `dst` and returns a 64-bit checksum of
/// them, in one pass over four independent lanes (memory-bandwidth bound).
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, not overlapping.
unsafe fn copy_and_hash(src: *const u8, dst: *mut u8, len: usize) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [
        0x243F_6A88_85A3_08D3u64,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
        0x082E_FA98_EC4E_6C89,
    ];
    let words = len / 32;
    for i in 0..words {
        for (l, lane) in lanes.iter_mut().enumerate() {
            let off = i * 32 + l * 8;
            // SAFETY: off + 8 <= words * 32 <= len; unaligned access is explicit.
            let w = unsafe { std::ptr::read_unaligned(src.add(off).cast::<u64>()) };
            // SAFETY: same bounds on the destination.
            unsafe { std::ptr::write_unaligned(dst.add(off).cast::<u64>(), w) };
            *lane = (*lane ^ w).wrapping_mul(K).rotate_left(29);
        }
    }
    let mut tail = len as u64;
    for off in words * 32..len {
        // SAFETY: off < len.
        let b = unsafe { *src.add(off) };
        // SAFETY: off < len.
        unsafe { *dst.add(off) = b };
        tail = (tail ^ u64::from(b)).wrapping_mul(K);
    }
    lanes.iter().fold(tail, |acc, l| (acc ^ l).wrapping_mul(K).rotate_left(31))
}
