//! Trajectory chunks through a real ring, reassembled into whole trajectories.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::shm_dir;
use rulka_shm::{
    read_chunk, write_chunk, Backpressure, ChunkHeader, ChunkLayout, Reassembler, RingConsumer,
    RingProducer, RingSpec, ShmError, Steps,
};

const LAYOUT: ChunkLayout =
    ChunkLayout { frame_len: 16, n_floats: 3, n_heads: 2, n_ingredients: 4, max_steps: 5 };

/// Steps `first..first+n` of a trajectory, every value derived from (traj, step).
fn steps(traj: u64, first: usize, n: usize) -> Steps {
    let mut s = Steps::default();
    for i in first..first + n {
        let x = (traj * 1000 + i as u64) as f32;
        s.frames.extend((0..16).map(|j| (i * 16 + j) as u8));
        s.floats.extend([x, x + 0.5, -x]);
        s.actions.extend([(i % 12) as i32, ((i + 5) % 12) as i32]);
        s.log_probs.push(-0.1 * x);
        s.values.push(x * 2.0);
        s.ingredients.extend([x, 1.0, 2.0, 3.0]);
        s.flags.push((i % 2) as u8);
    }
    s
}

fn header(collector: u32, trajectory: u64, first: u64, last: bool) -> ChunkHeader {
    ChunkHeader {
        collector,
        trajectory,
        group: 40 + trajectory,
        policy_version: 7 + first,
        first_step: first,
        is_last: last,
    }
}

#[test]
fn chunks_round_trip_and_reassemble_per_collector() {
    let dir = shm_dir();
    let spec = RingSpec::new(dir.path(), "r", 1, LAYOUT.schema(), 64, LAYOUT.max_record());
    let mut c = RingConsumer::create(&spec).unwrap();
    let mut p =
        RingProducer::attach(&spec, Duration::from_secs(1), Backpressure::DropOldest).unwrap();
    // Two collectors' chunks interleaved in one ring (as if multiplexed): 12 and 5 steps.
    write_chunk(&mut p, &LAYOUT, &header(0, 1, 0, false), &steps(1, 0, 5)).unwrap();
    write_chunk(&mut p, &LAYOUT, &header(1, 9, 0, true), &steps(9, 0, 5)).unwrap();
    write_chunk(&mut p, &LAYOUT, &header(0, 1, 5, false), &steps(1, 5, 5)).unwrap();
    write_chunk(&mut p, &LAYOUT, &header(0, 1, 10, true), &steps(1, 10, 2)).unwrap();
    let mut r = Reassembler::new(LAYOUT);
    let mut done = Vec::new();
    let mut buf = Vec::new();
    while c.pop(&mut buf) {
        if let Some(t) = r.push(&buf).unwrap() {
            done.push(t);
        }
    }
    assert_eq!(done.len(), 2);
    assert_eq!((done[0].collector, done[0].trajectory, done[0].group), (1, 9, 49));
    assert_eq!(done[0].steps, steps(9, 0, 5));
    assert_eq!((done[1].trajectory, done[1].steps.len()), (1, 12));
    assert_eq!(done[1].steps, steps(1, 0, 12), "reassembled steps differ from what was written");
    assert_eq!(done[1].policy_versions, (7, 17));
    assert_eq!(r.stats().completed, 2);
}

#[test]
fn incomplete_trajectories_are_dropped_never_spliced() {
    let mut r = Reassembler::new(LAYOUT);
    let enc = |h: ChunkHeader, s: Steps| {
        // Encode through a ring-free path: write into a tiny ring and read back.
        let dir = shm_dir();
        let spec = RingSpec::new(dir.path(), "e", 1, LAYOUT.schema(), 2, LAYOUT.max_record());
        let mut c = RingConsumer::create(&spec).unwrap();
        let mut p =
            RingProducer::attach(&spec, Duration::from_secs(1), Backpressure::DropOldest).unwrap();
        write_chunk(&mut p, &LAYOUT, &h, &s).unwrap();
        let mut b = Vec::new();
        assert!(c.pop(&mut b));
        b
    };
    // Trajectory 1 starts, then its collector restarts and begins trajectory 2.
    assert!(r.push(&enc(header(0, 1, 0, false), steps(1, 0, 5))).unwrap().is_none());
    let t = r.push(&enc(header(0, 2, 0, true), steps(2, 0, 3))).unwrap().unwrap();
    assert_eq!(t.trajectory, 2);
    assert_eq!(t.steps.len(), 3);
    // A middle chunk without its start is an orphan, not a trajectory.
    assert!(r.push(&enc(header(0, 3, 5, true), steps(3, 5, 2))).unwrap().is_none());
    // A gap inside a trajectory discards it.
    assert!(r.push(&enc(header(0, 4, 0, false), steps(4, 0, 5))).unwrap().is_none());
    assert!(r.push(&enc(header(0, 4, 6, true), steps(4, 6, 1))).unwrap().is_none());
    // A dead collector's partial trajectory is dropped on request.
    assert!(r.push(&enc(header(5, 8, 0, false), steps(8, 0, 2))).unwrap().is_none());
    assert!(r.drop_collector(5));
    let s = r.stats();
    assert_eq!((s.completed, s.dropped_incomplete, s.orphan_chunks), (1, 3, 2));
}

#[test]
fn bad_chunks_are_refused_at_the_producer_naming_the_field() {
    let dir = shm_dir();
    let spec = RingSpec::new(dir.path(), "r", 1, LAYOUT.schema(), 4, LAYOUT.max_record());
    let c = RingConsumer::create(&spec).unwrap();
    let mut p =
        RingProducer::attach(&spec, Duration::from_secs(1), Backpressure::DropOldest).unwrap();
    let h = header(0, 1, 0, true);
    assert!(matches!(
        write_chunk(&mut p, &LAYOUT, &h, &Steps::default()).unwrap_err(),
        ShmError::EmptyRecord
    ));
    let e = write_chunk(&mut p, &LAYOUT, &h, &steps(1, 0, 6)).unwrap_err();
    assert!(matches!(e, ShmError::RecordTooLarge { .. }), "{e}");
    let mut s = steps(1, 0, 3);
    s.values[2] = f32::NAN;
    let e = write_chunk(&mut p, &LAYOUT, &h, &s).unwrap_err();
    assert!(matches!(e, ShmError::NonFinite { field: "values", step: 2 }), "{e}");
    let mut s = steps(1, 0, 3);
    s.floats[4] = f32::INFINITY;
    assert!(matches!(
        write_chunk(&mut p, &LAYOUT, &h, &s).unwrap_err(),
        ShmError::NonFinite { field: "floats", step: 1 }
    ));
    let mut s = steps(1, 0, 3);
    s.frames.pop();
    assert!(matches!(
        write_chunk(&mut p, &LAYOUT, &h, &s).unwrap_err(),
        ShmError::InvalidChunk { field: "frames", .. }
    ));
    assert_eq!(c.stats().committed, 0, "a refused chunk reached the ring");
    assert!(matches!(read_chunk(&LAYOUT, &[0u8; 10]).unwrap_err(), ShmError::InvalidChunk { .. }));
}
