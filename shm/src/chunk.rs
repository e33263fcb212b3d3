//! Trajectory chunks: the record collectors write to their ring, and the
//! learner-side [`Reassembler`] that turns them back into whole trajectories.
//!
//! A chunk is consecutive steps of one trajectory: a 64-byte header (ids,
//! policy version, first step index, step count, last-chunk flag) followed by
//! column blocks — frames `u8[n·H·W]`, floats `f32[n·F]`, actions
//! `i32[n·heads]`, log-probs `f32[n]`, values `f32[n]`, reward ingredients
//! `f32[n·K]`, step flags `u8[n]` — in native (little-endian) byte order:
//! both ends run on the same machine.

use std::collections::HashMap;

#[cfg(unix)]
use crate::ring::RingProducer;
use crate::schema::{Dtype, Field, Schema};
use crate::ShmError;

const HEADER_LEN: usize = 64;
const LAST: u32 = 1;

/// Per-step sizes of a chunk and the most steps one chunk carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLayout {
    /// Bytes per frame (`H·W`).
    pub frame_len: usize,
    /// Floats per step.
    pub n_floats: usize,
    /// Action heads per step.
    pub n_heads: usize,
    /// Reward ingredients per step.
    pub n_ingredients: usize,
    /// Most steps in one chunk.
    pub max_steps: usize,
}

impl ChunkLayout {
    fn step_bytes(&self) -> usize {
        self.frame_len + 4 * self.n_floats + 4 * self.n_heads + 4 + 4 + 4 * self.n_ingredients + 1
    }

    /// Largest encoded chunk.
    pub fn max_record(&self) -> usize {
        HEADER_LEN + self.max_steps * self.step_bytes()
    }

    /// The record schema stored in the ring header.
    pub fn schema(&self) -> Schema {
        let f = |name: &str, dtype, shape: Vec<usize>| Field { name: name.into(), dtype, shape };
        Schema {
            fields: vec![
                f("header", Dtype::U8, vec![HEADER_LEN]),
                f("frames", Dtype::U8, vec![self.frame_len]),
                f("floats", Dtype::F32, vec![self.n_floats]),
                f("actions", Dtype::I32, vec![self.n_heads]),
                f("log_prob", Dtype::F32, vec![]),
                f("value", Dtype::F32, vec![]),
                f("ingredients", Dtype::F32, vec![self.n_ingredients]),
                f("step_flags", Dtype::U8, vec![]),
            ],
            params: vec![("chunk.max_steps".into(), self.max_steps as u64)],
        }
    }
}

/// Which trajectory a chunk belongs to: its collector slot, the slot's
/// incarnation (how many times that collector was started before), and the
/// rollout's sequence number within the incarnation. Chunk headers carry the
/// last two packed in one `u64` ([`ChunkHeader::trajectory`]: the
/// incarnation in the high 24 bits, the sequence in the low 40); this is
/// the one place that packing lives.
///
/// ```
/// use rulka_shm::TrajectoryId;
/// let id = TrajectoryId { collector: 3, incarnation: 2, sequence: 7 };
/// assert_eq!(id.packed(), (2 << 40) | 7);
/// assert_eq!(TrajectoryId::unpack(3, id.packed()), id);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TrajectoryId {
    /// The collector slot.
    pub collector: u32,
    /// The slot's incarnation (0 on its first start).
    pub incarnation: u32,
    /// The rollout's number within the incarnation (below 2^40).
    pub sequence: u64,
}

impl TrajectoryId {
    const SEQUENCE_BITS: u32 = 40;
    const SEQUENCE_MASK: u64 = (1 << Self::SEQUENCE_BITS) - 1;

    /// The id of `collector`'s trajectory whose packed number (a chunk
    /// header's `trajectory`) is `packed`.
    pub fn unpack(collector: u32, packed: u64) -> Self {
        Self {
            collector,
            incarnation: (packed >> Self::SEQUENCE_BITS) as u32,
            sequence: packed & Self::SEQUENCE_MASK,
        }
    }

    /// The id of the trajectory `header`'s chunk belongs to.
    pub fn of(header: &ChunkHeader) -> Self {
        Self::unpack(header.collector, header.trajectory)
    }

    /// Incarnation and sequence packed as chunk headers carry them.
    pub fn packed(&self) -> u64 {
        (u64::from(self.incarnation) << Self::SEQUENCE_BITS) | (self.sequence & Self::SEQUENCE_MASK)
    }
}

/// Identity of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkHeader {
    /// Collector index.
    pub collector: u32,
    /// Trajectory number, unique per collector: incarnation and sequence
    /// packed ([`TrajectoryId::packed`]).
    pub trajectory: u64,
    /// Group ("prompt") id: the track seed and start state shared by a GRPO group.
    pub group: u64,
    /// Version of the policy that produced these steps.
    pub policy_version: u64,
    /// Index of this chunk's first step within the trajectory.
    pub first_step: u64,
    /// Whether this chunk ends the trajectory.
    pub is_last: bool,
}

/// Column-major steps (one chunk's, or a whole trajectory's).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Steps {
    /// `n · frame_len` bytes.
    pub frames: Vec<u8>,
    /// `n · n_floats`.
    pub floats: Vec<f32>,
    /// `n · n_heads`.
    pub actions: Vec<i32>,
    /// `n`.
    pub log_probs: Vec<f32>,
    /// `n`.
    pub values: Vec<f32>,
    /// `n · n_ingredients`.
    pub ingredients: Vec<f32>,
    /// `n`.
    pub flags: Vec<u8>,
}

impl Steps {
    /// Number of steps (by the log-prob column).
    pub fn len(&self) -> usize {
        self.log_probs.len()
    }

    /// No steps.
    pub fn is_empty(&self) -> bool {
        self.log_probs.is_empty()
    }

    fn check(&self, l: &ChunkLayout) -> Result<usize, ShmError> {
        let n = self.len();
        for (field, found, per) in [
            ("frames", self.frames.len(), l.frame_len),
            ("floats", self.floats.len(), l.n_floats),
            ("actions", self.actions.len(), l.n_heads),
            ("values", self.values.len(), 1),
            ("ingredients", self.ingredients.len(), l.n_ingredients),
            ("flags", self.flags.len(), 1),
        ] {
            if found != n * per {
                return Err(ShmError::InvalidChunk { field, expected: n * per, found });
            }
        }
        for (field, col, per) in [
            ("floats", &self.floats, l.n_floats.max(1)),
            ("log_probs", &self.log_probs, 1),
            ("values", &self.values, 1),
            ("ingredients", &self.ingredients, l.n_ingredients.max(1)),
        ] {
            if let Some(i) = col.iter().position(|x| !x.is_finite()) {
                return Err(ShmError::NonFinite { field, step: i / per });
            }
        }
        Ok(n)
    }

    /// Appends `other`'s steps.
    pub fn extend(&mut self, other: &Steps) {
        self.frames.extend_from_slice(&other.frames);
        self.floats.extend_from_slice(&other.floats);
        self.actions.extend_from_slice(&other.actions);
        self.log_probs.extend_from_slice(&other.log_probs);
        self.values.extend_from_slice(&other.values);
        self.ingredients.extend_from_slice(&other.ingredients);
        self.flags.extend_from_slice(&other.flags);
    }
}

fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: T is one of f32/i32 (plain old data without padding); the byte view
    // covers exactly the slice's memory and lives no longer than the borrow.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// Validates and commits one chunk to `producer`. Empty chunks, chunks over
/// `layout.max_steps`, mismatched columns and non-finite values (named by
/// field and step) are refused before anything is written.
#[cfg(unix)]
pub fn write_chunk(
    producer: &mut RingProducer,
    layout: &ChunkLayout,
    header: &ChunkHeader,
    steps: &Steps,
) -> Result<(), ShmError> {
    let h = chunk_header(layout, header, steps)?;
    producer.push(&record_parts(&h, steps))
}

/// A chunk record's parts in order: header, then the step columns.
fn record_parts<'a>(header: &'a [u8], steps: &'a Steps) -> [&'a [u8]; 8] {
    [
        header,
        &steps.frames,
        bytes_of(&steps.floats),
        bytes_of(&steps.actions),
        bytes_of(&steps.log_probs),
        bytes_of(&steps.values),
        bytes_of(&steps.ingredients),
        &steps.flags,
    ]
}

/// The record [`write_chunk`] would commit, as one buffer (for transports
/// that send bytes), validated the same way. Byte order: little-endian
/// (columns are written in the host's order; rulka runs on little-endian hosts).
pub fn encode_chunk(
    layout: &ChunkLayout,
    header: &ChunkHeader,
    steps: &Steps,
) -> Result<Vec<u8>, ShmError> {
    let h = chunk_header(layout, header, steps)?;
    let mut out = Vec::with_capacity(HEADER_LEN + steps.len() * layout.step_bytes());
    for part in record_parts(&h, steps) {
        out.extend_from_slice(part);
    }
    Ok(out)
}

fn chunk_header(
    layout: &ChunkLayout,
    header: &ChunkHeader,
    steps: &Steps,
) -> Result<[u8; HEADER_LEN], ShmError> {
    let n = steps.check(layout)?;
    if n == 0 {
        return Err(ShmError::EmptyRecord);
    }
    if n > layout.max_steps {
        return Err(ShmError::RecordTooLarge {
            len: HEADER_LEN + n * layout.step_bytes(),
            max: layout.max_record(),
        });
    }
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&header.collector.to_le_bytes());
    h[4..8].copy_from_slice(&(n as u32).to_le_bytes());
    h[8..16].copy_from_slice(&header.trajectory.to_le_bytes());
    h[16..24].copy_from_slice(&header.group.to_le_bytes());
    h[24..32].copy_from_slice(&header.policy_version.to_le_bytes());
    h[32..40].copy_from_slice(&header.first_step.to_le_bytes());
    h[40..44].copy_from_slice(&(if header.is_last { LAST } else { 0 }).to_le_bytes());
    Ok(h)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Decodes a chunk record.
pub fn read_chunk(layout: &ChunkLayout, record: &[u8]) -> Result<(ChunkHeader, Steps), ShmError> {
    if record.len() < HEADER_LEN {
        return Err(ShmError::InvalidChunk {
            field: "header",
            expected: HEADER_LEN,
            found: record.len(),
        });
    }
    let n = u32_at(record, 4) as usize;
    let expected = HEADER_LEN + n * layout.step_bytes();
    if record.len() != expected || n == 0 {
        return Err(ShmError::InvalidChunk { field: "record", expected, found: record.len() });
    }
    let header = ChunkHeader {
        collector: u32_at(record, 0),
        trajectory: u64_at(record, 8),
        group: u64_at(record, 16),
        policy_version: u64_at(record, 24),
        first_step: u64_at(record, 32),
        is_last: u32_at(record, 40) & LAST != 0,
    };
    let mut off = HEADER_LEN;
    let mut take = |bytes: usize| {
        let s = &record[off..off + bytes];
        off += bytes;
        s
    };
    let f32s = |b: &[u8]| {
        b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>()
    };
    let frames = take(n * layout.frame_len).to_vec();
    let floats = f32s(take(4 * n * layout.n_floats));
    let actions = take(4 * n * layout.n_heads)
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let log_probs = f32s(take(4 * n));
    let values = f32s(take(4 * n));
    let ingredients = f32s(take(4 * n * layout.n_ingredients));
    let flags = take(n).to_vec();
    Ok((header, Steps { frames, floats, actions, log_probs, values, ingredients, flags }))
}

/// A whole trajectory, reassembled.
#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    /// Collector that produced it.
    pub collector: u32,
    /// Its id.
    pub trajectory: u64,
    /// Its group ("prompt").
    pub group: u64,
    /// Oldest and newest policy versions among its chunks.
    pub policy_versions: (u64, u64),
    /// All steps, in order.
    pub steps: Steps,
}

/// Counters of a [`Reassembler`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReassemblyStats {
    /// Trajectories completed.
    pub completed: u64,
    /// Incomplete trajectories discarded (producer died or restarted, gap).
    pub dropped_incomplete: u64,
    /// Chunks that fit no trajectory (a middle chunk without its start).
    pub orphan_chunks: u64,
}

#[derive(Debug)]
struct Partial {
    trajectory: u64,
    group: u64,
    versions: (u64, u64),
    steps: Steps,
}

/// Reassembles chunks into trajectories, per collector. A collector writes
/// one trajectory at a time; a chunk that does not continue the current one
/// (another trajectory id, or a step gap) discards it.
#[derive(Debug)]
pub struct Reassembler {
    layout: ChunkLayout,
    partial: HashMap<u32, Partial>,
    stats: ReassemblyStats,
    abandoned: Vec<(u32, u64)>,
}

impl Reassembler {
    /// A reassembler for chunks of `layout`.
    pub fn new(layout: ChunkLayout) -> Self {
        Self {
            layout,
            partial: HashMap::new(),
            stats: ReassemblyStats::default(),
            abandoned: Vec::new(),
        }
    }

    /// Adds one chunk record; returns the trajectory it completes, if any.
    pub fn push(&mut self, record: &[u8]) -> Result<Option<Trajectory>, ShmError> {
        let (h, steps) = read_chunk(&self.layout, record)?;
        let continues = self
            .partial
            .get(&h.collector)
            .is_some_and(|p| p.trajectory == h.trajectory && p.steps.len() as u64 == h.first_step);
        if !continues {
            if let Some(p) = self.partial.remove(&h.collector) {
                self.stats.dropped_incomplete += 1;
                self.abandoned.push((h.collector, p.trajectory));
            }
            if h.first_step != 0 {
                self.stats.orphan_chunks += 1;
                return Ok(None);
            }
            self.partial.insert(
                h.collector,
                Partial {
                    trajectory: h.trajectory,
                    group: h.group,
                    versions: (h.policy_version, h.policy_version),
                    steps: Steps::default(),
                },
            );
        }
        let Some(p) = self.partial.get_mut(&h.collector) else { return Ok(None) };
        p.steps.extend(&steps);
        p.versions = (p.versions.0.min(h.policy_version), p.versions.1.max(h.policy_version));
        if !h.is_last {
            return Ok(None);
        }
        let Some(p) = self.partial.remove(&h.collector) else { return Ok(None) };
        self.stats.completed += 1;
        Ok(Some(Trajectory {
            collector: h.collector,
            trajectory: p.trajectory,
            group: p.group,
            policy_versions: p.versions,
            steps: p.steps,
        }))
    }

    /// Discards the incomplete trajectory of a collector that died or
    /// restarted; returns whether there was one.
    pub fn drop_collector(&mut self, collector: u32) -> bool {
        let Some(p) = self.partial.remove(&collector) else { return false };
        self.stats.dropped_incomplete += 1;
        self.abandoned.push((collector, p.trajectory));
        true
    }

    /// `(collector, trajectory)` of the incomplete trajectories dropped since
    /// the last call: trajectories that began but will never be whole.
    pub fn take_abandoned(&mut self) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.abandoned)
    }

    /// Counters.
    pub fn stats(&self) -> ReassemblyStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trajectory_id_packs_incarnation_above_40_bits_of_sequence() {
        let id = TrajectoryId { collector: 3, incarnation: 2, sequence: 5 };
        assert_eq!(id.packed(), (2u64 << 40) + 5);
        assert_eq!(TrajectoryId::unpack(3, (2u64 << 40) + 5), id);
    }

    #[test]
    fn steps_are_empty_until_a_step_is_pushed() {
        let mut s = Steps::default();
        assert!(s.is_empty());
        assert_eq!(s.len(), 0);
        s.log_probs.push(-0.5);
        assert!(!s.is_empty() && s.len() == 1);
    }
}
