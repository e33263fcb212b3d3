//! The NATS transport when the server misbehaves, against a real
//! `nats-server` (one per test): a server that hangs (SIGSTOP) makes every
//! call end by its deadline, as a timeout; a lost and restored connection is
//! said once each way; a collector keeps its chunks while the server is gone
//! and its full outbox drops the oldest whole trajectories, counted; a
//! resumed trainer's weights are taken although their versions are lower; a
//! SIGKILLed server is reaped and restarted by its supervisor on the same
//! port with its store; collectors say they are alive.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use rulka_transport::{
    transfer_deadline, ChunkSink, NatsCollector, NatsServerEvent, NatsTrainer, RolloutSource, Sent,
    TransportError, WeightSink, WeightSource, API_DEADLINE, CHUNK_DEADLINE, POLL_SLACK,
    UNREACHABLE_REMINDER,
};

fn signal(pid: u32, sig: &str) {
    assert!(std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success());
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Bound for "returned at all": a hang fails the test; a slow machine does not.
const HANG: Duration = Duration::from_secs(45);

#[test]
fn a_hung_server_makes_every_call_end_by_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "h1");
    let trainer = open_trainer(&srv, "h1");
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    let mut weights = trainer.weights("net0");
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "h1", Duration::from_secs(5))
            .unwrap();
    let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    for (h, s) in trajectory(0, 0, 5) {
        assert_eq!(sink.send(&h, &s, &mut || true).unwrap(), Sent::Stored);
    }
    assert_eq!(collect(&mut src, 1, Duration::from_secs(10)).len(), 1);

    signal(srv.pid().unwrap(), "-STOP");
    let t0 = Instant::now();
    let mut got = Vec::new();
    src.poll(&mut got, Duration::from_millis(100)).unwrap();
    assert!(got.is_empty());
    // Its deadline: the pull's expiry + POLL_SLACK (a second of slack for a loaded machine).
    let poll_took = t0.elapsed();
    assert!(
        poll_took < Duration::from_millis(100) + POLL_SLACK + Duration::from_secs(1),
        "poll took {poll_took:?}"
    );
    let t0 = Instant::now();
    let e = weights.publish(2, &vec![2u8; 1 << 20]).unwrap_err();
    // Its deadline: transfer_deadline(1 MiB), ~17 s (plus a second of slack).
    let publish_took = t0.elapsed();
    assert!(
        publish_took < transfer_deadline(1 << 20) + Duration::from_secs(1),
        "publish took {publish_took:?}"
    );
    // A timeout, said as one (or, had the client noticed the dead server first, unreachable).
    assert!(
        matches!(e, TransportError::Timeout { .. } | TransportError::Unreachable { .. }),
        "{e:?}"
    );
    if matches!(e, TransportError::Timeout { .. }) {
        assert!(e.to_string().contains("timed out") && !e.to_string().contains("not found"), "{e}");
    }
    let retries_before = sink.stats().retries;
    let t0 = Instant::now();
    let mut queued = 0;
    for (h, s) in trajectory(0, 1, 9) {
        match sink.send(&h, &s, &mut || true).unwrap() {
            Sent::Queued => queued += 1,
            other => panic!("a chunk for a hung server: {other:?}"),
        }
    }
    assert_eq!(queued, 3);
    // One publish waited for its deadline; the chunks behind it did not wait
    // again (three waits would take 3 deadlines and count 3 retries).
    assert_eq!(sink.stats().retries - retries_before, 1, "{:?}", sink.stats());
    assert!(t0.elapsed() < CHUNK_DEADLINE * 2, "{:?}", t0.elapsed());

    signal(srv.pid().unwrap(), "-CONT");
    assert_eq!(
        sink.flush(Duration::from_secs(40)),
        0,
        "the outbox empties once the server answers"
    );
    let got = collect(&mut src, 1, Duration::from_secs(40));
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].trajectory, got[0].steps.len()), (1, 9));
    assert!(collect(&mut src, 1, Duration::from_millis(500)).is_empty(), "nothing twice");
}

/// The calls the test above does not make, against the same hung server:
/// each ends by its documented deadline, with an error (or, for the weight
/// watch and the outbox, with nothing), never later.
#[test]
fn the_other_calls_end_by_their_deadlines_against_a_hung_server() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "h7");
    let trainer = open_trainer(&srv, "h7");
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "h7", Duration::from_secs(5))
            .unwrap();
    let mut wsrc = col.weight_source().unwrap();
    let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    assert_eq!(col.next_incarnation(0).unwrap(), 0);

    signal(srv.pid().unwrap(), "-STOP");
    let slack = Duration::from_secs(1);
    let timed = |what: &str, deadline: Duration, f: &mut dyn FnMut() -> bool| {
        let t0 = Instant::now();
        assert!(f(), "{what}: not the failure expected");
        let took = t0.elapsed();
        assert!(took < deadline + slack, "{what} took {took:?}, its deadline {deadline:?}");
    };
    let failed = |r: Result<(), TransportError>| {
        matches!(r, Err(TransportError::Timeout { .. } | TransportError::Unreachable { .. }))
    };
    timed("next_incarnation", API_DEADLINE * 2, &mut || failed(col.next_incarnation(0).map(drop)));
    timed("join (wait 2 s)", Duration::from_secs(2) + API_DEADLINE, &mut || {
        failed(NatsCollector::join(col.link().clone(), "h7", Duration::from_secs(2)).map(drop))
    });
    timed("open", Duration::from_secs(30), &mut || {
        failed(
            NatsTrainer::open(trainer.link().clone(), &record("h7"), limits(1 << 30), false)
                .map(drop),
        )
    });
    // The weight watch answers from what it holds: nothing newer, at its timeout.
    timed("wait_newer (2 s)", Duration::from_secs(2), &mut || {
        matches!(wsrc.wait_newer(None, &mut Vec::new(), Duration::from_secs(2)), Ok(None))
    });
    // A chunk the hung server cannot take is queued; flush gives up at its limit.
    for (h, s) in trajectory(0, 0, 3) {
        assert_eq!(sink.send(&h, &s, &mut || true).unwrap(), Sent::Queued);
    }
    timed("flush (2 s)", Duration::from_secs(2), &mut || sink.flush(Duration::from_secs(2)) == 1);
    signal(srv.pid().unwrap(), "-CONT");
}

#[test]
fn a_lost_and_restored_connection_is_said_once_each_way() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = server(dir.path(), "h2");
    let link = connect(&srv.trainer_options("t"));
    let said = Arc::new(Mutex::new(Vec::<String>::new()));
    let s2 = said.clone();
    link.set_reporter(move |m| s2.lock().unwrap().push(m.to_string()));
    assert!(link.status().connected);
    srv.kill();
    wait_until("the link notices", HANG, || !link.status().connected);
    std::thread::sleep(Duration::from_secs(2));
    srv.restart().unwrap();
    wait_until("the link reconnects", HANG, || link.status().connected);
    wait_until("its return is said", HANG, || {
        said.lock().unwrap().iter().any(|m| m.contains("back after"))
    });
    // A JetStream round trip on the restored link: it is back for real.
    NatsTrainer::open(link.clone(), &record("h2"), limits(1 << 30), false).unwrap();
    let said = said.lock().unwrap().clone();
    let lost = said.iter().filter(|m| m.contains("lost")).count();
    let back = said.iter().filter(|m| m.contains("back after")).count();
    assert_eq!((lost, back), (1, 1), "{said:?}");
    assert!(said[0].contains(&srv.url()), "the server is named: {said:?}");
    let st = link.status();
    assert_eq!((st.drops, st.reconnects), (1, 1));
}

#[test]
fn a_full_outbox_drops_the_oldest_whole_trajectories_under_the_drop_policy() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = server(dir.path(), "h3");
    let trainer = open_trainer(&srv, "h3");
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "h3", Duration::from_secs(5))
            .unwrap();
    let chunk = rulka_shm::encode_chunk(&LAYOUT, &trajectory(0, 0, 4)[0].0, &steps(0, 0, 0, 4))
        .unwrap()
        .len();
    // Room for about three trajectories of three chunks; the drop policy
    // (`collectors.backpressure: drop_oldest`).
    let mut sink = col.chunk_sink(0, 0, LAYOUT, None, 10 * chunk);
    for t in 0..2u64 {
        for (h, s) in trajectory(0, t, 9) {
            assert_eq!(sink.send(&h, &s, &mut || true).unwrap(), Sent::Stored);
        }
    }
    srv.kill();
    wait_until("the collector's link notices", HANG, || !col.link().status().connected);
    for t in 2..12u64 {
        for (h, s) in trajectory(0, t, 9) {
            let sent = sink.send(&h, &s, &mut || true).unwrap();
            assert!(matches!(sent, Sent::Queued | Sent::Dropped), "{sent:?}");
        }
    }
    let st = sink.stats();
    assert!(st.outbox_dropped >= 6, "{st:?}");
    assert!(st.queued_bytes <= 10 * chunk as u64, "{st:?}");
    srv.restart().unwrap();
    assert_eq!(sink.flush(Duration::from_secs(40)), 0);
    let kept = 10 - st.outbox_dropped as usize;
    let got = collect(&mut src, 2 + kept, Duration::from_secs(40));
    let ids: HashSet<u64> = got.iter().map(|t| t.trajectory).collect();
    // The first two were stored before the outage; of the rest, the newest survive.
    let want: HashSet<u64> = (0..2).chain(12 - kept as u64..12).collect();
    assert_eq!(ids, want);
    assert_eq!(got.len(), ids.len(), "nothing twice");
    assert!(collect(&mut src, 1, Duration::from_millis(500)).is_empty());
}

#[test]
fn a_resumed_trainers_weights_are_taken_although_their_versions_are_lower() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "h4");
    let first = open_trainer(&srv, "h4");
    assert_eq!(first.epoch(), 0);
    let mut w1 = first.weights("net0");
    w1.publish(80, &[80u8; 1000]).unwrap();
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "h4", Duration::from_secs(5))
            .unwrap();
    let mut source = col.weight_source().unwrap();
    let mut buf = Vec::new();
    assert_eq!(source.wait_newer(None, &mut buf, Duration::from_secs(10)).unwrap(), Some(80));
    // The trainer crashes; a resumed one starts from its checkpoint at update 64.
    drop(w1);
    drop(first);
    let second = open_trainer(&srv, "h4");
    assert_eq!(second.epoch(), 1);
    let mut w2 = second.weights("net0");
    w2.publish(64, &[64u8; 1000]).unwrap();
    assert_eq!(source.wait_newer(Some(80), &mut buf, Duration::from_secs(15)).unwrap(), Some(64));
    assert_eq!(buf, vec![64u8; 1000]);
    assert_eq!(source.delivered(), Some((1, 64)));
    // Within the new epoch, versions move forward again.
    w2.publish(65, &[65u8; 1000]).unwrap();
    assert_eq!(source.wait_newer(Some(64), &mut buf, Duration::from_secs(15)).unwrap(), Some(65));
    // A fresh start of the same run name counts on from the last epoch.
    let third =
        NatsTrainer::open(connect(&srv.trainer_options("t")), &record("h4"), limits(1 << 30), true)
            .unwrap();
    assert_eq!(third.epoch(), 2);
}

#[test]
fn a_sigkilled_server_is_reaped_and_restarted_on_its_port_with_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = server(dir.path(), "h5");
    let port = srv.port();
    let trainer = open_trainer(&srv, "h5");
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "h5", Duration::from_secs(5))
            .unwrap();
    let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    for t in 0..3u64 {
        for (h, s) in trajectory(0, t, 6) {
            assert_eq!(sink.send(&h, &s, &mut || true).unwrap(), Sent::Stored);
        }
    }
    assert!(srv.supervise().is_none(), "a healthy server: nothing to say");
    let old = srv.pid().unwrap();
    signal(old, "-9");
    let mut events = Vec::new();
    wait_until("the supervisor restarts it", HANG, || {
        events.extend(srv.supervise());
        events.iter().any(|e| matches!(e, NatsServerEvent::Restarted { .. }))
    });
    assert!(
        matches!(&events[0], NatsServerEvent::Died { pid, status, .. } if *pid == old && status.contains('9')),
        "{events:?}"
    );
    // Reaped at once: no zombie left.
    let stat = std::fs::read_to_string(format!("/proc/{old}/stat")).unwrap_or_default();
    assert!(!stat.contains(") Z"), "zombie: {stat}");
    assert_eq!((srv.port(), srv.restarts()), (port, 1));
    assert!(srv.is_up() && srv.pid() != Some(old));
    // What the server had stored before its death is all there, once.
    let got = collect(&mut src, 3, HANG);
    let ids: HashSet<u64> = got.iter().map(|t| t.trajectory).collect();
    assert_eq!((ids, got.len()), ((0..3).collect(), 3));
    // And the same clients go on.
    for (h, s) in trajectory(0, 3, 6) {
        let sent = sink.send(&h, &s, &mut || true).unwrap();
        assert!(matches!(sent, Sent::Stored | Sent::Queued), "{sent:?}");
    }
    assert_eq!(sink.flush(HANG), 0);
    assert_eq!(collect(&mut src, 1, HANG)[0].trajectory, 3);
}

#[test]
fn collectors_say_they_are_alive() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "h6");
    let trainer = open_trainer(&srv, "h6");
    let view = trainer.remote_collectors();
    trainer.weights("net0").publish(3, &[3u8; 100]).unwrap();
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "h6", Duration::from_secs(5))
            .unwrap();
    let inc = col.next_incarnation(7).unwrap();
    let _sink = col.chunk_sink(7, inc, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    let mut source = col.weight_source().unwrap();
    let mut buf = Vec::new();
    assert_eq!(source.wait_newer(None, &mut buf, Duration::from_secs(10)).unwrap(), Some(3));
    wait_until("the trainer hears collector 7 with its weights", HANG, || {
        view.heard().iter().any(|(a, _)| a.id == 7 && a.weights == Some((0, 3)))
    });
    let (a, age) = view.heard().into_iter().find(|(a, _)| a.id == 7).unwrap();
    assert_eq!((a.incarnation, a.pid), (0, std::process::id()));
    assert!(age < Duration::from_secs(30));
}

#[test]
fn a_pulled_cable_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "h7");
    let proxy = Proxy::start(srv.port()).unwrap();
    let trainer = open_trainer(&srv, "h7");
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    let mut o = srv.collector_options("c");
    o.url = format!("nats://127.0.0.1:{}", proxy.port());
    let col = NatsCollector::join(connect(&o), "h7", Duration::from_secs(5)).unwrap();
    let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(5)), OUTBOX);
    let mut got = Vec::new();
    for t in 0..3u64 {
        for (h, s) in trajectory(0, t, 7) {
            assert_eq!(sink.send(&h, &s, &mut || true).unwrap(), Sent::Stored);
        }
    }
    // No byte moves for 12 s, nothing is closed: the client finds out by itself.
    proxy.blackhole();
    let t0 = Instant::now();
    let mut t = 3u64;
    while t0.elapsed() < Duration::from_secs(12) {
        for (h, s) in trajectory(0, t, 7) {
            let sent = sink.send(&h, &s, &mut || true).unwrap();
            assert!(matches!(sent, Sent::Stored | Sent::Queued), "{sent:?}");
        }
        t += 1;
        src.poll(&mut got, Duration::from_millis(50)).unwrap();
        src.commit().unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(sink.stats().queued > 0, "{:?}", sink.stats());
    proxy.restore();
    assert_eq!(sink.flush(HANG), 0, "{:?}", sink.stats());
    got.extend(collect(&mut src, t as usize - got.len(), HANG));
    let ids: HashSet<u64> = got.iter().map(|t| t.trajectory).collect();
    assert_eq!(ids, (0..t).collect::<HashSet<_>>());
    assert_eq!(got.len(), t as usize, "nothing twice");
    assert!(collect(&mut src, 1, Duration::from_millis(500)).is_empty());
}

#[test]
fn a_full_outbox_makes_a_blocking_collector_wait_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = server(dir.path(), "h8");
    let trainer = open_trainer(&srv, "h8");
    let mut src = trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap();
    let col =
        NatsCollector::join(connect(&srv.collector_options("c")), "h8", Duration::from_secs(5))
            .unwrap();
    let chunk = rulka_shm::encode_chunk(&LAYOUT, &trajectory(0, 0, 4)[0].0, &steps(0, 0, 0, 4))
        .unwrap()
        .len();
    let mut sink = col.chunk_sink(0, 0, LAYOUT, Some(Duration::from_secs(5)), 10 * chunk);
    srv.kill();
    wait_until("the collector's link notices", HANG, || !col.link().status().connected);
    // The outbox fills; then the collector waits (heartbeating through
    // keep_waiting) until it is told to stop: that chunk is abandoned.
    let mut waits = 0;
    let mut last = Sent::Queued;
    let mut t = 0u64;
    while last != Sent::Abandoned {
        for (h, s) in trajectory(0, t, 9) {
            last = sink
                .send(&h, &s, &mut || {
                    waits += 1;
                    waits < 5
                })
                .unwrap();
            if last == Sent::Abandoned {
                break;
            }
            assert_eq!(last, Sent::Queued);
        }
        t += 1;
        assert!(t < 20, "the outbox never filled");
    }
    let st = sink.stats();
    assert_eq!((st.full_waits, st.outbox_dropped), (1, 0), "{st:?}");
    assert!(st.queued_bytes <= 10 * chunk as u64, "{st:?}");
    // Back: what it held arrives, nothing dropped; the abandoned trajectory stays incomplete.
    srv.restart().unwrap();
    assert_eq!(sink.flush(HANG), 0);
    let got = collect(&mut src, t as usize - 1, HANG);
    let ids: HashSet<u64> = got.iter().map(|t| t.trajectory).collect();
    assert_eq!(ids, (0..t - 1).collect::<HashSet<_>>(), "all but the abandoned one");
    assert!(collect(&mut src, 1, Duration::from_millis(500)).is_empty());
}

/// A restart that fails (its port taken meanwhile: the new nats-server exits
/// at start) is said with its reason and tried again 1, 2, 4 s later — by the
/// wall clock too, no sooner — and once the port is free the server is back on
/// it, counted once.
#[test]
fn a_restart_that_fails_is_said_and_tried_again_with_back_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = server(dir.path(), "h6");
    let port = srv.port();
    signal(srv.pid().unwrap(), "-9");
    // Taken as soon as the dead server lets go of it (nothing restarts it
    // before the first supervise).
    let mut squatter = None;
    wait_until("the port is free", HANG, || {
        squatter = std::net::TcpListener::bind(("127.0.0.1", port)).ok();
        squatter.is_some()
    });
    let t0 = Instant::now();
    let mut events = Vec::new();
    wait_until("three failed restarts", HANG, || {
        events.extend(srv.supervise().map(|e| (t0.elapsed(), e)));
        events.iter().filter(|(_, e)| matches!(e, NatsServerEvent::RestartFailed { .. })).count()
            >= 3
    });
    assert!(
        matches!(events[0].1, NatsServerEvent::Died { restart_in, .. } if restart_in == Duration::from_millis(500)),
        "{events:?}"
    );
    let mut due = Duration::from_millis(500);
    for ((at, e), retry) in events[1..].iter().zip([1, 2, 4]) {
        let NatsServerEvent::RestartFailed { reason, retry_in } = e else { panic!("{events:?}") };
        assert!(
            reason.contains("exited at start") && reason.contains("nats-server.log"),
            "{reason}"
        );
        assert_eq!(*retry_in, Duration::from_secs(retry), "{events:?}");
        assert!(*at >= due, "a try at {at:?}, before its time {due:?}: {events:?}");
        due = *at + *retry_in;
    }
    assert!(!srv.is_up());
    drop(squatter);
    let mut back = None;
    wait_until("back once the port is free", HANG, || {
        back = srv.supervise().filter(|e| matches!(e, NatsServerEvent::Restarted { .. }));
        back.is_some()
    });
    assert!(t0.elapsed() >= due, "restarted before its back-off ended");
    assert_eq!((srv.port(), srv.restarts()), (port, 1));
    assert!(srv.is_up());
    open_trainer(&srv, "h6");
}

/// An outage that lasts is said again after `UNREACHABLE_REMINDER` (30 s)
/// — by the wall clock, not sooner and not much later — naming the server
/// and how long it has been gone; its end is said once.
#[test]
fn a_lasting_outage_is_said_again_every_30_s() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = server(dir.path(), "h8");
    let link = connect(&srv.trainer_options("t"));
    let said = Arc::new(Mutex::new(Vec::<(Instant, String)>::new()));
    let s2 = said.clone();
    link.set_reporter(move |m| s2.lock().unwrap().push((Instant::now(), m.to_string())));
    srv.kill();
    let when = |what: &str| said.lock().unwrap().iter().find(|(_, m)| m.contains(what)).cloned();
    wait_until("the loss is said", HANG, || when("lost").is_some());
    let (lost_at, _) = when("lost").unwrap();
    wait_until("the reminder", UNREACHABLE_REMINDER + HANG, || when("unreachable for").is_some());
    let (at, msg) = when("unreachable for").unwrap();
    let gap = at - lost_at;
    assert!(
        gap >= UNREACHABLE_REMINDER - Duration::from_millis(100)
            && gap < UNREACHABLE_REMINDER + Duration::from_secs(3),
        "reminded {gap:?} after the loss: {msg}"
    );
    assert!(msg.contains(&srv.url()) && msg.contains("unreachable for 3"), "{msg}");
    srv.restart().unwrap();
    wait_until("the return is said", HANG, || when("back after").is_some());
    let said = said.lock().unwrap();
    assert_eq!(said.iter().filter(|(_, m)| m.contains("unreachable for")).count(), 1, "{said:?}");
}
