//! Segments, rings and the board within one process: stale / old-layout /
//! half-initialised segments, back-pressure, oversize and empty records,
//! a model-based check of ring index arithmetic, and a torn-read stress.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::VecDeque;
use std::io::{Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::Duration;

use common::{shm_dir, Rng, Watchdog};
use rulka_shm::{
    Backpressure, BoardReader, BoardSpec, BoardWriter, Dtype, Field, RingConsumer, RingProducer,
    RingSpec, Schema, Segment, SegmentKind, SegmentOrigin, SegmentSpec, ShmError,
};

fn schema(n: usize) -> Schema {
    Schema {
        fields: vec![Field { name: "x".into(), dtype: Dtype::U8, shape: vec![n] }],
        params: vec![],
    }
}

const T: Duration = Duration::from_millis(200);

#[test]
fn same_run_reattaches_other_run_is_replaced_live_owner_refused() {
    let dir = shm_dir();
    let spec = RingSpec::new(dir.path(), "r", 1, schema(4), 4, 64);
    let mut c = RingConsumer::create(&spec).unwrap();
    let mut p = RingProducer::attach(&spec, T, Backpressure::DropOldest).unwrap();
    p.push(&[b"kept"]).unwrap();
    // A second owner while the first lives: refused, nothing touched.
    let e = RingConsumer::create(&spec).unwrap_err();
    assert!(matches!(e, ShmError::LockHeld { pid, .. } if pid == std::process::id()), "{e}");
    drop(c);
    // Owner gone, same run: the committed record is still there.
    c = RingConsumer::create(&spec).unwrap();
    let mut buf = Vec::new();
    assert!(c.pop(&mut buf));
    assert_eq!(buf, b"kept");
    drop((c, p));
    // Another run's segment is stale: replaced.
    let other = RingSpec::new(dir.path(), "r", 2, schema(4), 4, 64);
    let seg = Segment::create(&other.segment).unwrap();
    assert!(
        matches!(seg.origin(), SegmentOrigin::Replaced { reason } if reason.contains("belongs to run")),
        "{:?}",
        seg.origin()
    );
}

fn patch(path: &std::path::Path, offset: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn old_layout_version_is_a_typed_error() {
    let dir = shm_dir();
    let spec = RingSpec::new(dir.path(), "r", 1, schema(4), 4, 64);
    let c = RingConsumer::create(&spec).unwrap();
    patch(&spec.segment.path(), 12, &0u32.to_le_bytes()); // layout_version := 0
    let e = RingProducer::attach(&spec, T, Backpressure::DropOldest).unwrap_err();
    assert!(matches!(e, ShmError::VersionMismatch { found: 0, expected: 1, .. }), "{e}");
    drop(c);
}

#[test]
fn schema_drift_is_a_typed_error() {
    let dir = shm_dir();
    let c = RingConsumer::create(&RingSpec::new(dir.path(), "r", 1, schema(4), 4, 64)).unwrap();
    let e = RingProducer::attach(
        &RingSpec::new(dir.path(), "r", 1, schema(5), 4, 64),
        T,
        Backpressure::DropOldest,
    )
    .unwrap_err();
    assert!(matches!(e, ShmError::SchemaMismatch { .. }), "{e}");
    drop(c);
}

#[test]
fn half_initialised_segment_is_detected_then_replaced() {
    let dir = shm_dir();
    let spec = SegmentSpec {
        dir: dir.path().into(),
        name: "half".into(),
        kind: SegmentKind::Ring,
        run_id: 1,
        schema: schema(1),
        payload_size: 4096,
    };
    // What a creator killed before publishing READY leaves: magic, state 0.
    let mut bytes = vec![0u8; 8192];
    bytes[..8].copy_from_slice(b"RULKASHM");
    std::fs::write(spec.path(), &bytes).unwrap();
    let e = Segment::open(&spec, Duration::from_millis(50)).unwrap_err();
    assert!(matches!(e, ShmError::InitializationNotYetFinalized { .. }), "{e}");
    let seg = Segment::create(&spec).unwrap();
    assert!(
        matches!(seg.origin(), SegmentOrigin::Replaced { reason } if reason.contains("not initialised")),
        "{:?}",
        seg.origin()
    );
}

#[test]
fn not_a_segment_and_missing_segment_are_typed_errors() {
    let dir = shm_dir();
    let spec = SegmentSpec {
        dir: dir.path().into(),
        name: "x".into(),
        kind: SegmentKind::Ring,
        run_id: 1,
        schema: schema(1),
        payload_size: 64,
    };
    assert!(matches!(Segment::open(&spec, T).unwrap_err(), ShmError::NotFound { .. }));
    std::fs::write(spec.path(), vec![7u8; 8192]).unwrap();
    assert!(matches!(Segment::open(&spec, T).unwrap_err(), ShmError::Corrupt { .. }));
}

#[test]
fn exhausting_shared_memory_fails_at_creation() {
    let dir = shm_dir();
    let spec = SegmentSpec {
        dir: dir.path().into(),
        name: "huge".into(),
        kind: SegmentKind::Ring,
        run_id: 1,
        schema: schema(1),
        payload_size: 1 << 44,
    };
    let e = Segment::create(&spec).unwrap_err();
    assert!(matches!(e, ShmError::NoSpace { .. } | ShmError::Io { .. }), "{e}");
    assert!(!spec.path().exists(), "a failed creation left a file");
}

#[test]
fn full_ring_blocks_with_timeout_and_counts_waiting() {
    let dir = shm_dir();
    let spec = RingSpec::new(dir.path(), "r", 1, schema(1), 2, 16);
    let c = RingConsumer::create(&spec).unwrap();
    let mut p =
        RingProducer::attach(&spec, T, Backpressure::Block { timeout: Duration::from_millis(30) })
            .unwrap();
    p.push(&[b"a"]).unwrap();
    p.push(&[b"b"]).unwrap();
    let e = p.push(&[b"c"]).unwrap_err();
    assert!(
        matches!(e, ShmError::RingFull { waited } if waited >= Duration::from_millis(30)),
        "{e}"
    );
    let s = c.stats();
    assert_eq!((s.committed, s.consumed, s.dropped), (2, 0, 0));
    assert!(s.wait_ns >= 30_000_000);
}

#[test]
fn full_ring_drop_oldest_keeps_the_newest() {
    let dir = shm_dir();
    let spec = RingSpec::new(dir.path(), "r", 1, schema(1), 3, 16);
    let mut c = RingConsumer::create(&spec).unwrap();
    let mut p = RingProducer::attach(&spec, T, Backpressure::DropOldest).unwrap();
    for b in b"abcdefg" {
        p.push(&[&[*b]]).unwrap();
    }
    let mut got = Vec::new();
    let mut buf = Vec::new();
    while c.pop(&mut buf) {
        got.push(buf[0]);
    }
    assert_eq!(got, b"efg");
    assert_eq!(c.stats().dropped, 4);
}

#[test]
fn oversize_and_empty_records_are_refused_before_writing() {
    let dir = shm_dir();
    let spec = RingSpec::new(dir.path(), "r", 1, schema(1), 2, 100);
    let c = RingConsumer::create(&spec).unwrap();
    let mut p = RingProducer::attach(&spec, T, Backpressure::DropOldest).unwrap();
    let e = p.push(&[&[0u8; 60], &[0u8; 41]]).unwrap_err();
    assert!(matches!(e, ShmError::RecordTooLarge { len: 101, max: 100 }), "{e}");
    assert!(matches!(p.push(&[]).unwrap_err(), ShmError::EmptyRecord));
    assert!(matches!(p.push(&[b""]).unwrap_err(), ShmError::EmptyRecord));
    assert_eq!(c.stats().committed, 0);
    p.push(&[&[1u8; 100]]).unwrap();
    assert_eq!(c.stats().committed, 1);
}

#[test]
fn second_producer_is_refused_while_the_first_lives() {
    let dir = shm_dir();
    let spec = RingSpec::new(dir.path(), "r", 1, schema(1), 2, 16);
    let c = RingConsumer::create(&spec).unwrap();
    let p = RingProducer::attach(&spec, T, Backpressure::DropOldest).unwrap();
    assert!(
        matches!(c.producer().unwrap(), rulka_shm::Liveness::Alive(pid) if pid == std::process::id())
    );
    assert!(matches!(
        RingProducer::attach(&spec, T, Backpressure::DropOldest).unwrap_err(),
        ShmError::LockHeld { .. }
    ));
    drop(p);
    assert_eq!(c.producer().unwrap(), rulka_shm::Liveness::Dead);
    let p2 = RingProducer::attach(&spec, T, Backpressure::DropOldest).unwrap();
    assert_eq!(p2.stats().producer_generation, 2);
}

/// Model-based check of the index arithmetic: random pushes/pops against a
/// VecDeque, every capacity 1..=5, both policies, across many wraparounds.
#[test]
fn ring_matches_a_queue_model_across_wraparound() {
    let dir = shm_dir();
    let mut rng = Rng(0x5EED);
    for cap in 1..=5usize {
        for drop_oldest in [false, true] {
            let name = format!("m{cap}{drop_oldest}");
            let spec = RingSpec::new(dir.path(), &name, 1, schema(1), cap, 8);
            let mut c = RingConsumer::create(&spec).unwrap();
            let policy = if drop_oldest {
                Backpressure::DropOldest
            } else {
                Backpressure::Block { timeout: Duration::ZERO }
            };
            let mut p = RingProducer::attach(&spec, T, policy).unwrap();
            let mut model: VecDeque<u64> = VecDeque::new();
            let mut dropped = 0u64;
            let mut buf = Vec::new();
            for k in 0..3000u64 {
                if rng.below(100) < 55 {
                    let rec = k.to_le_bytes();
                    let len = 1 + rng.below(8) as usize;
                    match p.push(&[&rec[..len]]) {
                        Ok(()) => {
                            if model.len() == cap {
                                assert!(drop_oldest, "cap {cap}: push into a full ring succeeded");
                                model.pop_front();
                                dropped += 1;
                            }
                            // The record is the low `len` bytes of k.
                            model.push_back(if len == 8 {
                                k
                            } else {
                                k & ((1u64 << (8 * len)) - 1)
                            });
                        }
                        Err(ShmError::RingFull { .. }) => {
                            assert!(!drop_oldest && model.len() == cap)
                        }
                        Err(e) => panic!("{e}"),
                    }
                } else {
                    let got = c.pop(&mut buf);
                    match model.pop_front() {
                        Some(want) => {
                            assert!(got, "cap {cap}: model has {want} but the ring is empty");
                            let mut a = [0u8; 8];
                            a[..buf.len()].copy_from_slice(&buf);
                            assert_eq!(u64::from_le_bytes(a), want, "cap {cap} step {k}");
                        }
                        None => assert!(!got, "cap {cap}: ring returned a record the model lacks"),
                    }
                }
                let s = c.stats();
                assert_eq!(s.committed - s.consumed, model.len() as u64);
                assert_eq!(s.dropped, dropped);
            }
        }
    }
}

#[test]
fn board_readers_never_see_a_torn_snapshot() {
    let dir = shm_dir();
    let spec = BoardSpec::new(dir.path(), "b", 1, schema(1), 1 << 20);
    let mut w = BoardWriter::create(&spec).unwrap();
    let stop = Arc::new(std::sync::Mutex::new(false));
    let _dog = Watchdog::new("board torn-read stress", Duration::from_secs(60), Default::default());
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let r = BoardReader::open(&spec, T).unwrap();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut buf, mut reads, mut last) = (Vec::new(), 0u64, 0u64);
                while !*stop.lock().unwrap() {
                    if let Some(info) = r.read(&mut buf) {
                        let b = (info.version % 251) as u8;
                        assert!(
                            buf.iter().all(|&x| x == b),
                            "torn snapshot at version {}",
                            info.version
                        );
                        assert_eq!(
                            buf.len(),
                            4096 + (info.version as usize * 977) % ((1 << 20) - 4096)
                        );
                        assert!(info.version >= last, "version went backwards");
                        last = info.version;
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    for v in 1..=1000u64 {
        let len = 4096 + (v as usize * 977) % ((1 << 20) - 4096);
        w.publish(v, &vec![(v % 251) as u8; len]).unwrap();
    }
    *stop.lock().unwrap() = true;
    let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(reads > 0);
    assert!(matches!(w.publish(5, b"old").unwrap_err(), ShmError::VersionNotNewer { .. }));
    assert!(matches!(
        w.publish(9999, &vec![0u8; (1 << 20) + 1]).unwrap_err(),
        ShmError::RecordTooLarge { .. }
    ));
}

#[test]
fn wait_newer_sees_a_publish_and_times_out_without_one() {
    let dir = shm_dir();
    let spec = BoardSpec::new(dir.path(), "b", 1, schema(1), 64);
    let mut w = BoardWriter::create(&spec).unwrap();
    let r = BoardReader::open(&spec, T).unwrap();
    let mut buf = Vec::new();
    assert!(r.wait_newer(None, &mut buf, Duration::from_millis(20)).is_none());
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        w.publish(3, b"three").unwrap();
        w
    });
    let info = r.wait_newer(None, &mut buf, Duration::from_secs(10)).unwrap();
    assert_eq!((info.version, buf.as_slice()), (3, &b"three"[..]));
    let _w = t.join().unwrap();
    assert!(r.wait_newer(Some(3), &mut buf, Duration::from_millis(20)).is_none());
}

#[test]
fn a_creator_killed_mid_initialisation_leaves_nothing_visible() {
    let dir = shm_dir();
    let spec = RingSpec::new(dir.path(), "r", 1, schema(1), 2, 16);
    // What a creator killed before READY leaves: only its temporary file.
    std::fs::write(dir.path().join(".r.init.99999"), vec![0u8; 100]).unwrap();
    let e = RingProducer::attach(&spec, Duration::from_millis(20), Backpressure::DropOldest)
        .unwrap_err();
    assert!(matches!(e, ShmError::NotFound { .. }), "{e}");
    let c = RingConsumer::create(&spec).unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains(".init.")), "stale temp kept: {names:?}");
    drop(c);
}

/// A ring's clean shutdown removes its segment and its lock files; the
/// segment names the process that created it.
#[test]
fn a_removed_ring_leaves_no_file_and_its_creator_is_named() {
    let dir = shm_dir();
    let spec = RingSpec::new(dir.path(), "r", 1, schema(4), 4, 64);
    let c = RingConsumer::create(&spec).unwrap();
    let p = RingProducer::attach(&spec, T, Backpressure::DropOldest).unwrap();
    drop(p);
    let seg = Segment::open(&spec.segment, T).unwrap();
    assert_eq!(seg.creator_pid(), std::process::id());
    drop(seg);
    assert!(std::fs::read_dir(dir.path()).unwrap().count() > 0);
    c.remove().unwrap();
    let left: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
