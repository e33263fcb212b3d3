//! The NATS transport against a real `nats-server` (one per test, own port
//! and store directory, started by the test): every trajectory exactly once
//! across collectors, resends stored once, a SIGKILLed and restarted server
//! or cut connections lose nothing, a restarted trainer gets what it had not
//! taken, back-pressure blocks then resumes, weights only move forward and
//! survive a failed publish, and bad credentials, TLS and schemas are named.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use rulka_shm::{Trajectory, TrajectoryId};
use rulka_transport::{
    ChunkSink, NatsCollector, NatsOptions, NatsTrainer, RolloutSource, Sent, TransportError,
    WeightSink, WeightSource,
};

fn check_contents(t: &Trajectory, len: usize) {
    assert_eq!(t.steps.len(), len, "trajectory {:x}", t.trajectory);
    for k in 0..len {
        assert_eq!(t.steps.floats[3 * k + 2], k as f32, "steps in order");
        assert_eq!(t.steps.floats[3 * k], t.collector as f32);
    }
}

#[test]
fn three_collectors_deliver_every_trajectory_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "r1");
    let trainer = NatsTrainer::open(
        connect(&srv.trainer_options("trainer")),
        &record("r1"),
        limits(1 << 30),
        false,
    )
    .unwrap();
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    let mut handles = Vec::new();
    for c in 0..3u32 {
        let o = srv.collector_options(&format!("c{c}"));
        handles.push(std::thread::spawn(move || {
            let col = NatsCollector::join(connect(&o), "r1", Duration::from_secs(5)).unwrap();
            let inc = col.next_incarnation(c).unwrap();
            assert_eq!(inc, 0);
            let mut sink = col.chunk_sink(c, inc, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
            for t in 0..20u64 {
                for (h, s) in trajectory(c, t, 3 + (t as usize % 9)) {
                    assert_eq!(sink.send(&h, &s, &mut || true).unwrap(), Sent::Stored);
                }
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    let got = collect(&mut src, 60, Duration::from_secs(20));
    assert_eq!(got.len(), 60);
    let ids: HashSet<(u32, u64)> = got.iter().map(|t| (t.collector, t.trajectory)).collect();
    assert_eq!(ids.len(), 60, "no duplicates");
    for t in &got {
        check_contents(t, 3 + (t.trajectory as usize % 9));
    }
    // Nothing more comes.
    assert!(collect(&mut src, 1, Duration::from_millis(500)).is_empty());
    assert_eq!(src.stats().repeats_ignored, 0);
}

#[test]
fn a_resent_chunk_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "r2");
    let trainer = open_trainer(&srv, "r2");
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "r2", Duration::from_secs(5))
            .unwrap();
    let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    let chunks = trajectory(0, 0, 10);
    for (h, s) in &chunks {
        sink.send(h, s, &mut || true).unwrap();
        sink.send(h, s, &mut || true).unwrap(); // forced resend, same message id
    }
    let got = collect(&mut src, 1, Duration::from_secs(10));
    assert_eq!(got.len(), 1);
    check_contents(&got[0], 10);
    assert!(collect(&mut src, 1, Duration::from_millis(500)).is_empty(), "stored once");
    assert_eq!(src.stats().repeats_ignored, 0, "the server dropped the repeats itself");
}

#[test]
fn a_killed_and_restarted_server_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = server(dir.path(), "r3");
    let trainer = open_trainer(&srv, "r3");
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    let o = srv.collector_options("c");
    let col = NatsCollector::join(connect(&o), "r3", Duration::from_secs(5)).unwrap();
    let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(30)), OUTBOX);
    for t in 0..5u64 {
        for (h, s) in trajectory(0, t, 9) {
            sink.send(&h, &s, &mut || true).unwrap();
        }
    }
    srv.kill();
    // Sent while the server is down: held in the outbox (the collector goes
    // on), then delivered in order with the same ids once it is back. (The
    // restart waits for the sends: a timer raced them on a loaded machine.)
    let mut queued = 0;
    for t in 5..10u64 {
        for (h, s) in trajectory(0, t, 9) {
            match sink.send(&h, &s, &mut || true).unwrap() {
                Sent::Queued => queued += 1,
                other => panic!("the server is down, yet {other:?}"),
            }
        }
    }
    assert_eq!(queued, 15, "every chunk waited in the outbox");
    srv.restart().unwrap();
    assert_eq!(
        sink.flush(Duration::from_secs(30)),
        0,
        "the outbox emptied once the server was back"
    );
    assert_eq!(sink.stats().outbox_dropped, 0);
    let got = collect(&mut src, 10, Duration::from_secs(30));
    let ids: HashSet<u64> = got.iter().map(|t| t.trajectory).collect();
    assert_eq!(ids, (0..10).collect::<HashSet<_>>());
    assert_eq!(got.len(), 10);
}

#[test]
fn cut_connections_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "r4");
    let proxy = Proxy::start(srv.port()).unwrap();
    let via =
        |o: NatsOptions| NatsOptions { url: format!("nats://127.0.0.1:{}", proxy.port()), ..o };
    let trainer = NatsTrainer::open(
        connect(&via(srv.trainer_options("t"))),
        &record("r4"),
        limits(1 << 30),
        false,
    )
    .unwrap();
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    let col = NatsCollector::join(
        connect(&via(srv.collector_options("c"))),
        "r4",
        Duration::from_secs(5),
    )
    .unwrap();
    let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(30)), OUTBOX);
    let mut got = Vec::new();
    for t in 0..12u64 {
        if t % 4 == 2 {
            proxy.cut();
            let p = &proxy;
            std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(500));
                    p.restore();
                });
                for (h, st) in trajectory(0, t, 7) {
                    let sent = sink.send(&h, &st, &mut || true).unwrap();
                    assert!(matches!(sent, Sent::Stored | Sent::Queued), "{sent:?}");
                }
            });
        } else {
            for (h, st) in trajectory(0, t, 7) {
                sink.send(&h, &st, &mut || true).unwrap();
            }
        }
        src.poll(&mut got, Duration::from_millis(50)).unwrap();
        src.commit().unwrap();
    }
    assert_eq!(sink.flush(Duration::from_secs(30)), 0);
    got.extend(collect(&mut src, 12 - got.len(), Duration::from_secs(30)));
    let ids: HashSet<u64> = got.iter().map(|t| t.trajectory).collect();
    assert_eq!((got.len(), ids.len()), (12, 12));
}

#[test]
fn a_restarted_trainer_gets_what_it_had_not_taken_and_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "r5");
    let lim = limits(1 << 30);
    let col = {
        let t = NatsTrainer::open(connect(&srv.trainer_options("t0")), &record("r5"), lim, false)
            .unwrap();
        drop(t);
        NatsCollector::join(connect(&srv.collector_options("c")), "r5", Duration::from_secs(5))
            .unwrap()
    };
    let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    for t in 0..6u64 {
        for (h, s) in trajectory(0, t, 6) {
            sink.send(&h, &s, &mut || true).unwrap();
        }
    }
    // Trajectory 6: only its first chunk so far.
    let t6 = trajectory(0, 6, 6);
    sink.send(&t6[0].0, &t6[0].1, &mut || true).unwrap();
    let first: Vec<u64> = {
        let trainer =
            NatsTrainer::open(connect(&srv.trainer_options("t1")), &record("r5"), lim, false)
                .unwrap();
        let mut src = trainer.rollouts(LAYOUT, lim).unwrap();
        let got = collect(&mut src, 6, Duration::from_secs(10));
        assert_eq!(src.partials(), 1, "trajectory 6 held, not acknowledged");
        got.iter().map(|t| t.trajectory).collect()
        // The trainer "dies" here: its connection closes with trajectory 6's chunk unacked.
    };
    assert_eq!(first, (0..6).collect::<Vec<_>>());
    sink.send(&t6[1].0, &t6[1].1, &mut || true).unwrap();
    let short = NatsTrainer::open(
        connect(&srv.trainer_options("t2")),
        &record("r5"),
        rulka_transport::StreamLimits {
            max_bytes: 1 << 30,
            max_per_collector: -1,
            ack_wait: Duration::from_secs(1),
        },
        false,
    )
    .unwrap();
    let mut src = short.rollouts(LAYOUT, lim).unwrap();
    let got = collect(&mut src, 1, Duration::from_secs(40));
    assert_eq!(
        got.iter().map(|t| t.trajectory).collect::<Vec<_>>(),
        vec![6],
        "redelivered and completed"
    );
    check_contents(&got[0], 6);
    assert!(collect(&mut src, 1, Duration::from_millis(500)).is_empty(), "nothing taken twice");
}

#[test]
fn a_collector_killed_mid_trajectory_is_counted_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "r6");
    let trainer = open_trainer(&srv, "r6");
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    let o = srv.collector_options("c");
    let col = NatsCollector::join(connect(&o), "r6", Duration::from_secs(5)).unwrap();
    let inc = col.next_incarnation(3).unwrap();
    let mut sink = col.chunk_sink(3, inc, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    let half =
        trajectory(3, TrajectoryId { collector: 3, incarnation: inc, sequence: 0 }.packed(), 10);
    sink.send(&half[0].0, &half[0].1, &mut || true).unwrap(); // then "killed"
    drop(sink);
    let col = NatsCollector::join(connect(&o), "r6", Duration::from_secs(5)).unwrap();
    let inc2 = col.next_incarnation(3).unwrap();
    assert_eq!((inc, inc2), (0, 1), "a restart is a new incarnation");
    let mut sink = col.chunk_sink(3, inc2, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    for (h, s) in
        trajectory(3, TrajectoryId { collector: 3, incarnation: inc2, sequence: 0 }.packed(), 5)
    {
        sink.send(&h, &s, &mut || true).unwrap();
    }
    let got = collect(&mut src, 1, Duration::from_secs(10));
    assert_eq!(got.len(), 1);
    assert_eq!(TrajectoryId::unpack(got[0].collector, got[0].trajectory).incarnation, 1);
    assert_eq!(src.stats().incomplete_dropped, 1);
}

#[test]
fn a_full_stream_blocks_collectors_until_the_trainer_reads() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "r7");
    // Room for a few chunks only (a chunk of 4 steps is ~400 bytes).
    let lim = limits(4096);
    let trainer =
        NatsTrainer::open(connect(&srv.trainer_options("t")), &record("r7"), lim, false).unwrap();
    let o = srv.collector_options("c");
    let stop = Arc::new(Mutex::new(false));
    let s2 = stop.clone();
    let producer = std::thread::spawn(move || {
        let col = NatsCollector::join(connect(&o), "r7", Duration::from_secs(5)).unwrap();
        let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(60)), OUTBOX);
        for t in 0..30u64 {
            for (h, s) in trajectory(0, t, 8) {
                assert_eq!(sink.send(&h, &s, &mut || !*s2.lock().unwrap()).unwrap(), Sent::Stored);
            }
        }
        sink.stats()
    });
    std::thread::sleep(Duration::from_secs(2)); // the trainer is paused: the stream fills
    assert!(!producer.is_finished(), "the collector must be blocked on the full stream");
    let mut src = trainer.rollouts(LAYOUT, lim).unwrap();
    let got = collect(&mut src, 30, Duration::from_secs(60));
    let stats = producer.join().unwrap();
    assert!(stats.full_waits > 0, "{stats:?}");
    assert_eq!(got.len(), 30);
    *stop.lock().unwrap() = true;
}

#[test]
fn weights_only_move_forward_and_end_on_the_latest() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "r8");
    let trainer = open_trainer(&srv, "r8");
    let mut sink = trainer.weights("net0");
    let watchers: Vec<_> = (0..2)
        .map(|i| {
            let o = srv.collector_options(&format!("w{i}"));
            std::thread::spawn(move || {
                let col = NatsCollector::join(connect(&o), "r8", Duration::from_secs(5)).unwrap();
                let mut src = col.weight_source().unwrap();
                let (mut seen, mut buf, mut current) = (Vec::new(), Vec::new(), None);
                let t0 = Instant::now();
                while current != Some(20) && t0.elapsed() < Duration::from_secs(30) {
                    if let Some(v) =
                        src.wait_newer(current, &mut buf, Duration::from_millis(200)).unwrap()
                    {
                        assert_eq!(buf, vec![v as u8; 200_000], "the bytes of version {v}");
                        seen.push(v);
                        current = Some(v);
                    }
                }
                seen
            })
        })
        .collect();
    for v in 1..=20u64 {
        sink.publish(v, &vec![v as u8; 200_000]).unwrap();
    }
    for w in watchers {
        let seen = w.join().unwrap();
        assert_eq!(seen.last(), Some(&20), "{seen:?}");
        assert!(seen.windows(2).all(|p| p[0] < p[1]), "never backwards: {seen:?}");
    }
    // An older snapshot of the same trainer announced after a newer one (a
    // slow upload landing late) is not taken by a collector holding the newer.
    let o = srv.collector_options("late");
    let col = NatsCollector::join(connect(&o), "r8", Duration::from_secs(5)).unwrap();
    let mut src = col.weight_source().unwrap();
    let mut buf = Vec::new();
    assert_eq!(src.wait_newer(None, &mut buf, Duration::from_secs(10)).unwrap(), Some(20));
    sink.publish(7, &vec![7u8; 200_000]).unwrap();
    assert_eq!(
        src.wait_newer(Some(20), &mut buf, Duration::from_secs(2)).unwrap(),
        None,
        "version 7 taken after version 20"
    );
    assert_eq!(buf, vec![20u8; 200_000], "the weights kept are version 20's");
}

#[test]
fn a_server_killed_during_a_weight_put_keeps_the_old_weights() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = server(dir.path(), "r9");
    let trainer = open_trainer(&srv, "r9");
    let mut sink = trainer.weights("net0");
    sink.publish(1, &[1u8; 1000]).unwrap();
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "r9", Duration::from_secs(5))
            .unwrap();
    let mut src = col.weight_source().unwrap();
    let mut buf = Vec::new();
    assert_eq!(src.wait_newer(None, &mut buf, Duration::from_secs(5)).unwrap(), Some(1));
    // A large snapshot whose put the server's death interrupts.
    let pid = srv.pid().unwrap();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    let r = sink.publish(2, &vec![2u8; 64 << 20]);
    killer.join().unwrap();
    assert!(r.is_err(), "the interrupted put fails");
    srv.restart().unwrap();
    // The announced weights are still version 1; a collector never sees a torn version 2.
    assert_eq!(src.wait_newer(Some(1), &mut buf, Duration::from_secs(3)).unwrap(), None);
    assert_eq!(src.latest().map(|l| l.version), Some(1));
    sink.publish(3, &[3u8; 1000]).unwrap();
    assert_eq!(src.wait_newer(Some(1), &mut buf, Duration::from_secs(10)).unwrap(), Some(3));
    assert_eq!(buf, vec![3u8; 1000]);
}

/// Replaces object `name` of run `run`'s weight store with `bytes`, as a
/// corrupting disk or a foreign writer would (the trainer's credentials).
fn overwrite_object(srv: &rulka_transport::LocalNatsServer, run: &str, name: &str, bytes: Vec<u8>) {
    let o = srv.trainer_options("corrupter");
    let store_name = rulka_transport::NatsRunNames::new(run).unwrap().objects;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let mut opts = async_nats::ConnectOptions::new();
        if let (Some(u), Some(p)) = (o.user, o.password) {
            opts = async_nats::ConnectOptions::with_user_and_password(u, p);
        }
        let client = opts.connect(o.url.as_str()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let store = js.get_object_store(store_name).await.unwrap();
        store.put(name, &mut &bytes[..]).await.unwrap();
    });
}

/// A snapshot whose bytes are not the ones announced — one byte flipped at
/// the announced size (only the SHA-256 tells), or a byte short — is never
/// taken: the collector keeps its weights, fetches it again once mended,
/// and takes the next sound one; a new source holding a version takes only
/// a newer one.
#[test]
fn a_corrupted_weight_snapshot_is_refused_by_its_sha256_and_the_weights_kept() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "rc");
    let trainer = open_trainer(&srv, "rc");
    let mut sink = trainer.weights("net0");
    sink.publish(1, &[1u8; 1000]).unwrap();
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "rc", Duration::from_secs(5))
            .unwrap();
    let mut src = col.weight_source().unwrap();
    let mut buf = Vec::new();
    assert_eq!(src.wait_newer(None, &mut buf, Duration::from_secs(5)).unwrap(), Some(1));
    let announced = |src: &rulka_transport::NatsWeightSource, v: u64| {
        let t0 = Instant::now();
        while src.latest().map(|l| l.version) != Some(v) {
            assert!(t0.elapsed() < Duration::from_secs(10), "v{v} never announced");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let take = |src: &mut rulka_transport::NatsWeightSource, held: u64, buf: &mut Vec<u8>| {
        let t0 = Instant::now();
        let mut got = None;
        while got.is_none() && t0.elapsed() < Duration::from_secs(10) {
            got = src.wait_newer(Some(held), buf, Duration::from_millis(300)).unwrap();
        }
        got
    };
    // v2 with one byte flipped at the announced size: only the SHA-256 tells.
    let mut flipped = vec![2u8; 1000];
    flipped[500] ^= 0x10;
    sink.publish(2, &[2u8; 1000]).unwrap();
    overwrite_object(&srv, "rc", "weights-e0000-v000000000002", flipped);
    announced(&src, 2);
    assert_eq!(src.wait_newer(Some(1), &mut buf, Duration::from_secs(3)).unwrap(), None);
    assert_eq!((buf.clone(), src.delivered()), (vec![1u8; 1000], Some((0, 1))), "v1 kept");
    // A sound v3 right behind it is taken at once: a refusal holds up only
    // the snapshot refused.
    sink.publish(3, &[3u8; 1000]).unwrap();
    announced(&src, 3);
    assert_eq!(src.wait_newer(Some(1), &mut buf, Duration::from_secs(3)).unwrap(), Some(3));
    assert_eq!(buf, vec![3u8; 1000]);
    // v4 a byte short; mended (the sound bytes put back), it is fetched
    // again — after a second's pause, not never.
    sink.publish(4, &[4u8; 1000]).unwrap();
    overwrite_object(&srv, "rc", "weights-e0000-v000000000004", vec![4u8; 999]);
    announced(&src, 4);
    assert_eq!(src.wait_newer(Some(3), &mut buf, Duration::from_secs(3)).unwrap(), None);
    assert_eq!((buf.clone(), src.delivered()), (vec![3u8; 1000], Some((0, 3))), "v3 kept");
    // Mended a while after the refusal (past the second's pause).
    std::thread::sleep(Duration::from_millis(1200));
    overwrite_object(&srv, "rc", "weights-e0000-v000000000004", vec![4u8; 1000]);
    assert_eq!(take(&mut src, 3, &mut buf), Some(4), "the mended v4 was never fetched again");
    assert_eq!(buf, vec![4u8; 1000]);
    // A new source (a restarted engine) holding v4 already: v4 is not newer,
    // v5 is.
    let mut fresh = col.weight_source().unwrap();
    announced(&fresh, 4);
    assert_eq!(fresh.wait_newer(Some(4), &mut buf, Duration::from_millis(500)).unwrap(), None);
    sink.publish(5, &[5u8; 1000]).unwrap();
    assert_eq!(take(&mut fresh, 4, &mut buf), Some(5));
    assert_eq!(buf, vec![5u8; 1000]);
}

/// A server whose port is taken by another server fails to start; it is not
/// mistaken for the one already listening there (the CI once connected a test
/// to another test's server and got its authorization error).
#[test]
fn a_server_never_takes_another_server_for_itself() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = server(a.path(), "p1");
    let second = server_on(b.path(), "p2", first.port());
    let err = second.expect_err("the port is the first server's").to_string();
    assert!(err.contains("exited at start"), "{err}");
    // Many servers started at once on free ports each get their own.
    let dirs: Vec<_> = (0..6).map(|_| tempfile::tempdir().unwrap()).collect();
    let servers: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = dirs.iter().map(|d| s.spawn(|| server(d.path(), "p3"))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ports: HashSet<u16> = servers.iter().map(|s| s.port()).chain([first.port()]).collect();
    assert_eq!(ports.len(), 7, "{ports:?}");
    for s in &servers {
        connect(&s.trainer_options("t"));
    }
}

#[test]
fn bad_credentials_tls_and_schemas_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "ra");
    let _t = open_trainer(&srv, "ra");
    let mut bad = srv.collector_options("c");
    bad.password = Some("wrong".into());
    let e = rulka_transport::NatsLink::connect(&bad).unwrap_err();
    assert!(matches!(e, TransportError::Auth { .. }), "{e}");
    assert!(e.to_string().contains("authorization"), "{e}");
    let mut token = srv.collector_options("c");
    token.user = None;
    token.password = None;
    token.token = Some("nope".into());
    assert!(matches!(
        rulka_transport::NatsLink::connect(&token).unwrap_err(),
        TransportError::Auth { .. }
    ));
    // A client that requires TLS against a server without it.
    let mut tls = srv.collector_options("c");
    tls.tls = Some(Default::default());
    let e = rulka_transport::NatsLink::connect(&tls).unwrap_err();
    assert!(matches!(e, TransportError::Tls { .. }), "{e}");
    // Schema mismatch: named, both values.
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "ra", Duration::from_secs(5))
            .unwrap();
    let e = col.check("0123456789abcdef", "net0").unwrap_err().to_string();
    assert!(e.contains("chunk record schema") && e.contains("0123456789abcdef"), "{e}");
    assert!(col.check(&col.record().schema_hash, "net0").is_ok());
    // The collector user may publish only its run's trajectory subjects.
    let other =
        NatsCollector::join(connect(&srv.collector_options("c")), "ra", Duration::from_secs(5))
            .unwrap();
    drop(other);
    let link = connect(&srv.collector_options("c"));
    let e =
        rulka_transport::NatsCollector::join(link, "zz", Duration::from_millis(300)).unwrap_err();
    assert!(e.to_string().contains("run zz not found"), "{e}");
}

#[test]
fn a_collectors_subject_limit_blocks_only_that_collector() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "rb");
    // Each collector may have 6 chunks in the stream (a 4-chunk trajectory fits).
    let lim = rulka_transport::StreamLimits {
        max_bytes: 1 << 30,
        max_per_collector: 6,
        ack_wait: Duration::from_secs(30),
    };
    let trainer =
        NatsTrainer::open(connect(&srv.trainer_options("t")), &record("rb"), lim, false).unwrap();
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "rb", Duration::from_secs(5))
            .unwrap();
    let mut fast = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    let mut other = col.chunk_sink(1, 0, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    let mut waited = 0;
    let mut blocked = false;
    // 3 trajectories of 2 chunks fill collector 0's share; the 4th waits.
    for t in 0..4u64 {
        for (h, s) in trajectory(0, t, 8) {
            let r = fast.send(&h, &s, &mut || {
                waited += 1;
                waited < 5
            });
            blocked |= r.unwrap() == Sent::Abandoned;
        }
    }
    assert!(blocked && fast.stats().full_waits > 0, "collector 0 is held at 6 chunks");
    for (h, s) in trajectory(1, 0, 8) {
        assert_eq!(other.send(&h, &s, &mut || true).unwrap(), Sent::Stored, "collector 1 is not");
    }
    let mut src = trainer.rollouts(LAYOUT, lim).unwrap();
    let got = collect(&mut src, 4, Duration::from_secs(10));
    assert_eq!(got.len(), 4);
    // Taken and acknowledged: collector 0 has room again.
    for (h, s) in trajectory(0, 3, 8) {
        assert_eq!(fast.send(&h, &s, &mut || true).unwrap(), Sent::Stored);
    }
}

/// Certificates for 127.0.0.1 from a throw-away CA, made with the openssl CLI.
fn certificates(dir: &std::path::Path) -> Option<()> {
    let sh = |args: &str| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(args)
            .current_dir(dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=rulka-test-ca")?;
    for who in ["server", "client"] {
        sh(&format!(
            "openssl req -newkey rsa:2048 -nodes -keyout {who}.key -out {who}.csr -subj /CN={who}"
        ))?;
        sh(&format!("printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth,clientAuth\\n' > {who}.ext && openssl x509 -req -in {who}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out {who}.pem -days 2 -extfile {who}.ext"))?;
    }
    Some(())
}

#[test]
fn tls_with_client_certificates_is_required_where_configured() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    if certificates(&certs).is_none() {
        assert!(std::env::var_os("CI").is_none(), "openssl is needed to make test certificates");
        eprintln!("SKIPPED: no openssl to make test certificates");
        return;
    }
    let c = |f: &str| certs.join(f);
    let srv = rulka_transport::LocalNatsServer::start(rulka_transport::NatsServerSpec {
        dir: dir.path().join("srv"),
        host: "127.0.0.1".into(),
        port: 0,
        users: Some(rulka_transport::NatsUsers::random()),
        runs: vec!["rt".into()],
        tls: Some((c("server.pem"), c("server.key"), Some(c("ca.pem")))),
        extra: String::new(),
        tied_to_parent: false,
    })
    .unwrap();
    let tls = |cert: bool| rulka_transport::TlsOptions {
        ca: Some(c("ca.pem")),
        cert: cert.then(|| c("client.pem")),
        key: cert.then(|| c("client.key")),
    };
    // With the CA and a client certificate: a working run.
    let mut o = srv.trainer_options("t");
    o.tls = Some(tls(true));
    let trainer = NatsTrainer::open(connect(&o), &record("rt"), limits(1 << 30), false).unwrap();
    let mut co = srv.collector_options("c");
    co.tls = Some(tls(true));
    let col = NatsCollector::join(connect(&co), "rt", Duration::from_secs(5)).unwrap();
    let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    for (h, s) in trajectory(0, 0, 5) {
        sink.send(&h, &s, &mut || true).unwrap();
    }
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    assert_eq!(collect(&mut src, 1, Duration::from_secs(10)).len(), 1);
    // Without a client certificate, or without trusting the server's CA: refused, named.
    let mut no_cert = srv.collector_options("c");
    no_cert.tls = Some(tls(false));
    let e = rulka_transport::NatsLink::connect(&no_cert).unwrap_err();
    assert!(matches!(e, TransportError::Tls { .. }), "no client certificate: {e}");
    let plain = srv.collector_options("c");
    let e = rulka_transport::NatsLink::connect(&plain).unwrap_err();
    assert!(matches!(e, TransportError::Tls { .. }), "no TLS where the server requires it: {e}");
}

/// A default-network-sized snapshot (8+ MB) reaches a collector-user source:
/// object fetches that large need the collector to answer flow control.
#[test]
fn a_large_snapshot_reaches_a_collector() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "rc");
    let trainer = open_trainer(&srv, "rc");
    let mut sink = trainer.weights("net0");
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "rc", Duration::from_secs(5))
            .unwrap();
    let mut src = col.weight_source().unwrap();
    let big: Vec<u8> = (0..9_000_000u32).map(|i| (i % 251) as u8).collect();
    sink.publish(1, &big).unwrap();
    let mut buf = Vec::new();
    assert_eq!(src.wait_newer(None, &mut buf, Duration::from_secs(30)).unwrap(), Some(1));
    assert!(buf == big, "the snapshot's bytes");
}

/// Eight starts of one collector slot at the same moment (a service
/// manager restarting a collector while another copy of it still runs):
/// each gets its own incarnation, 0 to 7, so no two of them ever number
/// trajectories alike. The count is a compare-and-set on the run's bucket;
/// a read-then-put would hand two racing starts the same number.
#[test]
fn simultaneous_starts_of_one_slot_get_distinct_incarnations() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "r9");
    let _trainer = open_trainer(&srv, "r9");
    let n = 8;
    let cols: Vec<NatsCollector> = (0..n)
        .map(|k| {
            let o = srv.collector_options(&format!("c{k}"));
            NatsCollector::join(connect(&o), "r9", Duration::from_secs(5)).unwrap()
        })
        .collect();
    let go = Arc::new(std::sync::Barrier::new(n));
    let handles: Vec<_> = cols
        .into_iter()
        .map(|col| {
            let go = go.clone();
            std::thread::spawn(move || {
                go.wait();
                col.next_incarnation(5).unwrap()
            })
        })
        .collect();
    let mut got: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    got.sort_unstable();
    assert_eq!(got, (0..n as u32).collect::<Vec<_>>());
}
