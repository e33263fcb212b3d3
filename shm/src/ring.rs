//! Single-producer / single-consumer record ring in a shared segment.
//!
//! Commit protocol (no lock is held across a write):
//! - slot `p % capacity` carries a sequence word: `2p+1` while record `p` is
//!   being written, `2p+2` once it is complete;
//! - the producer writes the payload, stores `2p+2` (Release), then advances
//!   `head` to `p+1` (Release) — the commit;
//! - the consumer reads record `t` only if `t < head` (Acquire), copies it,
//!   re-checks the slot's sequence word (a drop-oldest producer may have
//!   reused the slot meanwhile), and claims it by CAS on `tail`.
//!
//! A producer killed at any instruction leaves `head` at its last commit: the
//! half-written record is never visible, and every committed one stays
//! readable. A restarted producer continues at `head`.

use std::mem::size_of;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::lock::{probe_lock, Liveness, ProcessLock};
use crate::schema::{Schema, SegmentKind};
use crate::segment::{Segment, SegmentSpec};
use crate::sync::{fence, AtomicU64, Ordering};
use crate::ShmError;

const CACHE_LINE: usize = 64;

/// What the producer does when the ring is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backpressure {
    /// Wait for the consumer, up to the timeout ([`ShmError::RingFull`] after).
    Block {
        /// How long to wait before giving up.
        timeout: Duration,
    },
    /// Overwrite the oldest unread record (counted in [`RingStats::dropped`]).
    DropOldest,
}

#[repr(C, align(64))]
struct RingHeader {
    head: AtomicU64,
    _pad0: [u8; CACHE_LINE - 8],
    tail: AtomicU64,
    _pad1: [u8; CACHE_LINE - 8],
    capacity: u64,
    slot_payload: u64,
    dropped: AtomicU64,
    wait_ns: AtomicU64,
    producer_generation: AtomicU64,
    _pad2: [u8; CACHE_LINE - 40],
}

#[repr(C, align(64))]
struct SlotHeader {
    seq: AtomicU64,
    len: AtomicU64,
    _pad: [u8; CACHE_LINE - 16],
}

/// Counters shared by both ends of a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingStats {
    /// Records committed so far (the head position).
    pub committed: u64,
    /// Records claimed by the consumer so far (the tail position).
    pub consumed: u64,
    /// Records overwritten unread under drop-oldest.
    pub dropped: u64,
    /// Nanoseconds producers spent blocked on a full ring.
    pub wait_ns: u64,
    /// How many producers have attached (a restart increments it).
    pub producer_generation: u64,
}

/// Shape of a ring: how many records, and how large one may be.
#[derive(Debug, Clone)]
pub struct RingSpec {
    /// Directory, name, run id and record schema.
    pub segment: SegmentSpec,
    /// Records the ring holds.
    pub capacity: usize,
    /// Largest record in bytes.
    pub max_record: usize,
}

impl RingSpec {
    /// A ring spec; `payload_size` is computed from capacity and record size.
    pub fn new(
        dir: &Path,
        name: &str,
        run_id: u64,
        schema: Schema,
        capacity: usize,
        max_record: usize,
    ) -> Self {
        let slot = slot_stride(max_record);
        let segment = SegmentSpec {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            kind: SegmentKind::Ring,
            run_id,
            schema: with_shape(schema, capacity, max_record),
            payload_size: size_of::<RingHeader>() + capacity * slot,
        };
        Self { segment, capacity, max_record }
    }

    fn lock_path(&self, role: &str) -> PathBuf {
        self.segment.dir.join(format!("{}.{role}", self.segment.name))
    }
}

fn with_shape(mut schema: Schema, capacity: usize, max_record: usize) -> Schema {
    schema.params.push(("ring.capacity".into(), capacity as u64));
    schema.params.push(("ring.max_record".into(), max_record as u64));
    schema
}

fn slot_stride(max_record: usize) -> usize {
    size_of::<SlotHeader>() + max_record.div_ceil(CACHE_LINE) * CACHE_LINE
}

/// The shared part of both ends.
#[derive(Debug)]
struct RingMap {
    seg: Segment,
    capacity: u64,
    max_record: usize,
    stride: usize,
}

impl RingMap {
    fn new(seg: Segment, spec: &RingSpec) -> Result<Self, ShmError> {
        let stride = slot_stride(spec.max_record);
        let need = size_of::<RingHeader>() + spec.capacity * stride;
        if seg.payload_len() < need || spec.capacity == 0 {
            return Err(ShmError::Corrupt {
                path: seg.path().to_path_buf(),
                reason: format!("payload {} < ring size {need}", seg.payload_len()),
            });
        }
        Ok(Self { seg, capacity: spec.capacity as u64, max_record: spec.max_record, stride })
    }

    fn header(&self) -> &RingHeader {
        // SAFETY: the payload starts page-aligned and holds a RingHeader (size checked
        // in `new`); all mutable fields are atomics.
        unsafe { &*self.seg.payload().cast::<RingHeader>() }
    }

    fn slot(&self, pos: u64) -> (&SlotHeader, *mut u8) {
        let i = (pos % self.capacity) as usize;
        // SAFETY: i < capacity, and capacity slots of `stride` bytes follow the header
        // (checked in `new`); slot headers are 64-byte aligned atomics.
        unsafe {
            let base = self.seg.payload().add(size_of::<RingHeader>() + i * self.stride);
            (&*base.cast::<SlotHeader>(), base.add(size_of::<SlotHeader>()))
        }
    }

    fn stats(&self) -> RingStats {
        let h = self.header();
        RingStats {
            committed: h.head.load(Ordering::Acquire),
            consumed: h.tail.load(Ordering::Acquire),
            dropped: h.dropped.load(Ordering::Relaxed),
            wait_ns: h.wait_ns.load(Ordering::Relaxed),
            producer_generation: h.producer_generation.load(Ordering::Relaxed),
        }
    }
}

/// The writing end (a collector).
#[derive(Debug)]
pub struct RingProducer {
    map: RingMap,
    policy: Backpressure,
    _lock: ProcessLock,
    consumer_lock: PathBuf,
}

impl RingProducer {
    /// Attaches to an existing ring as its only producer (a second one gets
    /// [`ShmError::LockHeld`]; a dead one's lock is free at once).
    pub fn attach(
        spec: &RingSpec,
        init_timeout: Duration,
        policy: Backpressure,
    ) -> Result<Self, ShmError> {
        let lock = ProcessLock::acquire(&spec.lock_path("producer"))?;
        let seg = Segment::open(&spec.segment, init_timeout)?;
        let map = RingMap::new(seg, spec)?;
        map.header().producer_generation.fetch_add(1, Ordering::AcqRel);
        Ok(Self { map, policy, _lock: lock, consumer_lock: spec.lock_path("consumer") })
    }

    /// Largest record this ring takes.
    pub fn max_record(&self) -> usize {
        self.map.max_record
    }

    /// Commits one record made of `parts` concatenated (gathered straight
    /// into shared memory, no intermediate buffer). Oversize and empty
    /// records are refused before any byte is written.
    pub fn push(&mut self, parts: &[&[u8]]) -> Result<(), ShmError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len == 0 {
            return Err(ShmError::EmptyRecord);
        }
        if len > self.map.max_record {
            return Err(ShmError::RecordTooLarge { len, max: self.map.max_record });
        }
        let h = self.map.header();
        let pos = h.head.load(Ordering::Relaxed);
        self.make_room(pos)?;
        let (slot, data) = self.map.slot(pos);
        slot.seq.store(2 * pos + 1, Ordering::Relaxed);
        // SYNC POINT: the odd sequence must be visible before any payload byte changes,
        // so a consumer copying an older record in this slot sees the change.
        fence(Ordering::Release);
        let mut off = 0;
        for part in parts {
            // SAFETY: off + part.len() <= len <= max_record, the slot's payload capacity;
            // `part` is process-local memory, so the ranges cannot overlap.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), data.add(off), part.len()) };
            off += part.len();
        }
        slot.len.store(len as u64, Ordering::Relaxed);
        // SYNC POINT: Release publishes the payload and length with the even sequence…
        slot.seq.store(2 * pos + 2, Ordering::Release);
        // …and the head advance is the commit the consumer Acquires.
        h.head.store(pos + 1, Ordering::Release);
        Ok(())
    }

    fn make_room(&self, pos: u64) -> Result<(), ShmError> {
        let h = self.map.header();
        let cap = self.map.capacity;
        let mut start: Option<Instant> = None;
        loop {
            let tail = h.tail.load(Ordering::Acquire);
            if pos - tail < cap {
                if let Some(s) = start {
                    h.wait_ns.fetch_add(s.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
                return Ok(());
            }
            match self.policy {
                Backpressure::DropOldest => {
                    if h.tail
                        .compare_exchange(tail, tail + 1, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        h.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Backpressure::Block { timeout } => {
                    let s = *start.get_or_insert_with(Instant::now);
                    let waited = s.elapsed();
                    if waited >= timeout {
                        h.wait_ns.fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
                        return Err(ShmError::RingFull { waited });
                    }
                    backoff(waited);
                }
            }
        }
    }

    /// Counters of this ring.
    pub fn stats(&self) -> RingStats {
        self.map.stats()
    }

    /// Whether this ring's consumer (the learner) is alive; a collector
    /// whose learner died stops instead of waiting on a full ring forever.
    pub fn consumer(&self) -> Result<Liveness, ShmError> {
        probe_lock(&self.consumer_lock)
    }
}

/// The reading end (the learner).
#[derive(Debug)]
pub struct RingConsumer {
    map: RingMap,
    _lock: ProcessLock,
    producer_lock: PathBuf,
}

impl RingConsumer {
    /// Creates (or re-attaches) a ring as its owner and returns the consumer end.
    pub fn create(spec: &RingSpec) -> Result<Self, ShmError> {
        let seg = Segment::create(&spec.segment)?;
        let fresh = !matches!(seg.origin(), crate::segment::SegmentOrigin::Reattached);
        let mut map = RingMap::new(seg, spec)?;
        if fresh {
            // SAFETY: the header area is inside the mapping and not yet published (the
            // segment is not READY); plain writes to non-atomic fields are unobserved.
            unsafe {
                let h = map.seg.payload().cast::<RingHeader>();
                (*h).capacity = map.capacity;
                (*h).slot_payload = map.max_record as u64;
            }
            map.seg.publish_ready()?;
        }
        let h = map.header();
        if h.capacity != map.capacity || h.slot_payload != map.max_record as u64 {
            return Err(ShmError::Corrupt {
                path: map.seg.path().to_path_buf(),
                reason: "ring geometry differs from its schema".into(),
            });
        }
        let lock = ProcessLock::acquire(&spec.lock_path("consumer"))?;
        Ok(Self { map, _lock: lock, producer_lock: spec.lock_path("producer") })
    }

    /// Copies the oldest committed record into `out` (replacing its
    /// contents) and returns `true`, or returns `false` if none is ready.
    pub fn pop(&mut self, out: &mut Vec<u8>) -> bool {
        let h = self.map.header();
        loop {
            let tail = h.tail.load(Ordering::Acquire);
            // SYNC POINT: Acquire pairs with the producer's Release of head.
            if tail >= h.head.load(Ordering::Acquire) {
                return false;
            }
            let (slot, data) = self.map.slot(tail);
            let s1 = slot.seq.load(Ordering::Acquire);
            if s1 != 2 * tail + 2 {
                continue; // overwritten under drop-oldest: tail has moved on
            }
            let len = (slot.len.load(Ordering::Relaxed) as usize).min(self.map.max_record);
            out.clear();
            out.reserve(len);
            // SAFETY: `len` <= the slot's payload capacity; `out` has room for `len`
            // bytes; the copy may race with a drop-oldest producer, which the sequence
            // re-check below detects (the copy is then discarded).
            unsafe {
                std::ptr::copy_nonoverlapping(data, out.as_mut_ptr(), len);
                out.set_len(len);
            }
            // SYNC POINT: order the payload reads before the sequence re-check.
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) != s1 {
                continue;
            }
            if h.tail.compare_exchange(tail, tail + 1, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                return true;
            }
        }
    }

    /// [`RingConsumer::pop`], waiting up to `timeout` for a record.
    pub fn pop_timeout(&mut self, out: &mut Vec<u8>, timeout: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.pop(out) {
                return true;
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return false;
            }
            backoff(waited);
        }
    }

    /// Whether this ring's producer is alive (kernel-released lock: a killed
    /// producer reads [`Liveness::Dead`] immediately).
    pub fn producer(&self) -> Result<Liveness, ShmError> {
        probe_lock(&self.producer_lock)
    }

    /// Counters of this ring.
    pub fn stats(&self) -> RingStats {
        self.map.stats()
    }

    /// Removes the ring's segment and lock files (clean shutdown).
    pub fn remove(self) -> Result<(), ShmError> {
        let RingConsumer { map, _lock: lock, producer_lock } = self;
        let _ = std::fs::remove_file(&producer_lock);
        lock.release();
        map.seg.remove()
    }
}

/// Spin briefly, then yield, then sleep: a short wait costs no latency, a
/// long one no CPU.
pub(crate) fn backoff(waited: Duration) {
    if waited < Duration::from_micros(20) {
        std::hint::spin_loop();
    } else if waited < Duration::from_micros(200) {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(100));
    }
}
