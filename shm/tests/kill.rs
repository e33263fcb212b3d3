//! Real processes, real SIGKILL: collectors killed at random points while
//! writing, a learner killed while publishing. The test binary re-executes
//! itself as the child (`RULKA_SHM_CHILD` selects the role).

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{shm_dir, Rng, Watchdog};
use rulka_shm::{
    Backpressure, BoardReader, BoardSpec, BoardWriter, Liveness, RingConsumer, RingProducer,
    RingSpec, Schema, ShmError,
};

const RUN: u64 = 0xC0FFEE;
const MAX_RECORD: usize = 4096;

fn ring_spec(dir: &Path, name: &str) -> RingSpec {
    RingSpec::new(dir, name, RUN, Schema::default(), 8, MAX_RECORD)
}

fn board_spec(dir: &Path) -> BoardSpec {
    BoardSpec::new(dir, "board", RUN, Schema::default(), 4 << 20)
}

/// Record k of child run r: [r u32][k u32][pattern byte repeated], length varies.
fn record(r: u32, k: u32) -> Vec<u8> {
    let len = 64 + ((r as usize * 7919 + k as usize * 104_729) % (MAX_RECORD - 64));
    let mut v = vec![(r.wrapping_mul(31).wrapping_add(k) % 251) as u8; len];
    v[0..4].copy_from_slice(&r.to_le_bytes());
    v[4..8].copy_from_slice(&k.to_le_bytes());
    v
}

fn check_record(buf: &[u8]) -> (u32, u32) {
    let r = u32::from_le_bytes(buf[0..4].try_into().unwrap());
    let k = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    assert_eq!(buf, record(r, k).as_slice(), "torn or corrupt record r={r} k={k}");
    (r, k)
}

const BIG_RECORD: usize = 8 << 20;

fn big_record(rec: &mut [u8], k: u32) {
    rec.fill((k % 251) as u8);
    rec[..4].copy_from_slice(&k.to_le_bytes());
    let n = rec.len();
    rec[n - 4..].copy_from_slice(&k.to_le_bytes());
}

fn snapshot_len(v: u64) -> usize {
    4096 + (v as usize * 48_271) % ((4 << 20) - 4096)
}

/// The child roles. Without `RULKA_SHM_CHILD` this test does nothing.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var("RULKA_SHM_CHILD") else { return };
    let dir = std::env::var("RULKA_SHM_DIR").unwrap();
    let dir = Path::new(&dir);
    match role.as_str() {
        "producer" => {
            let name = std::env::var("RULKA_SHM_RING").unwrap();
            let r: u32 = std::env::var("RULKA_SHM_RUN").unwrap().parse().unwrap();
            let spec = ring_spec(dir, &name);
            let started = Instant::now();
            let mut p = loop {
                match RingProducer::attach(
                    &spec,
                    Duration::from_secs(5),
                    Backpressure::Block { timeout: Duration::from_secs(3600) },
                ) {
                    Ok(p) => break p,
                    // The previous producer's lock is released when the kernel reaps it.
                    Err(ShmError::LockHeld { .. })
                        if started.elapsed() < Duration::from_secs(10) =>
                    {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => panic!("{e}"),
                }
            };
            for k in 0.. {
                p.push(&[&record(r, k)]).unwrap();
            }
        }
        "publisher" => {
            let spec = board_spec(dir);
            let started = Instant::now();
            let mut w = loop {
                match BoardWriter::create(&spec) {
                    Ok(w) => break w,
                    Err(ShmError::LockHeld { .. })
                        if started.elapsed() < Duration::from_secs(10) =>
                    {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => panic!("{e}"),
                }
            };
            let mut v = w.latest().map_or(0, |i| i.version);
            loop {
                v += 1;
                w.publish(v, &vec![(v % 251) as u8; snapshot_len(v)]).unwrap();
            }
        }
        "big-producer" => {
            // Records of BIG_RECORD bytes: [k][fill k % 251 …][k], so that most
            // of its time is spent copying into a slot.
            let spec = RingSpec::new(dir, "ring-big", RUN, Schema::default(), 4, BIG_RECORD);
            let mut p = RingProducer::attach(
                &spec,
                Duration::from_secs(5),
                Backpressure::Block { timeout: Duration::from_secs(3600) },
            )
            .unwrap();
            let mut rec = vec![0u8; BIG_RECORD];
            for k in 0u32.. {
                big_record(&mut rec, k);
                p.push(&[&rec]).unwrap();
            }
        }
        other => panic!("unknown child role {other}"),
    }
}

fn spawn(role: &str, dir: &Path, env: &[(&str, String)], pids: &Arc<Mutex<Vec<u32>>>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("RULKA_SHM_CHILD", role)
        .env("RULKA_SHM_DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    pids.lock().unwrap().push(child.id());
    child
}

/// Kills and reaps the child when dropped, so a failing test leaves no process behind.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn kill(child: &mut Child) {
    // SIGKILL: no exit handlers, no unwinding — the faithful crash.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let status = child.wait().unwrap(); // reap: no zombie keeps the lock alive
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "child exited on its own: {status:?}");
}

#[test]
fn collectors_killed_at_random_points_lose_nothing_committed() {
    let dir = shm_dir();
    let pids = Arc::new(Mutex::new(Vec::new()));
    let _dog = Watchdog::new("collector kill test", Duration::from_secs(240), pids.clone());
    let (spec_a, spec_b) = (ring_spec(dir.path(), "ring-a"), ring_spec(dir.path(), "ring-b"));
    let mut a = RingConsumer::create(&spec_a).unwrap();
    let mut b = RingConsumer::create(&spec_b).unwrap();
    // Collector B lives through the whole test; A is killed over and over.
    let mut child_b = KillOnDrop(spawn(
        "producer",
        dir.path(),
        &[("RULKA_SHM_RING", "ring-b".into()), ("RULKA_SHM_RUN", "0".into())],
        &pids,
    ));
    let mut rng = Rng(42);
    let mut buf = Vec::new();
    let (mut next_b, mut received_a) = (0u32, 0u64);
    let kills = 120u32;
    let mut pop_b = |b: &mut RingConsumer, next_b: &mut u32| {
        while b.pop(&mut buf) {
            let (r, k) = check_record(&buf);
            assert_eq!((r, k), (0, *next_b), "collector B lost or reordered a record");
            *next_b += 1;
        }
    };
    for run in 1..=kills {
        let mut child = KillOnDrop(spawn(
            "producer",
            dir.path(),
            &[("RULKA_SHM_RING", "ring-a".into()), ("RULKA_SHM_RUN", run.to_string())],
            &pids,
        ));
        // Odd runs: the kill timer starts at spawn (many die during start-up, before
        // attaching). Even runs: it starts once the child has committed its first
        // record, so half the kills land mid-write however slow process start-up is
        // on a loaded machine (no bound on how long that takes: the watchdog has one).
        let mut next_k = 0u32;
        let mut abuf = Vec::new();
        if run % 2 == 0 {
            while next_k == 0 {
                if a.pop(&mut abuf) {
                    let (r, k) = check_record(&abuf);
                    assert_eq!((r, k), (run, 0), "collector A's run {run} started mid-stream");
                    next_k = 1;
                } else {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        let deadline = Instant::now() + Duration::from_micros(500 + rng.below(15_000));
        while Instant::now() < deadline {
            if a.pop(&mut abuf) {
                let (r, k) = check_record(&abuf);
                assert_eq!((r, k), (run, next_k), "gap or reorder in collector A's run {run}");
                next_k += 1;
            }
        }
        if run == 1 {
            // Collector B lists as alive once it has attached (under load that can take a
            // while after spawning); the learner's own consumer locks always do.
            let t = Instant::now();
            let b_alive = |peers: &[rulka_shm::Peer]| {
                peers.iter().any(|p| {
                    p.segment == "ring-b"
                        && p.role == "producer"
                        && matches!(p.liveness, Liveness::Alive(_))
                })
            };
            let mut peers = rulka_shm::attached_peers(dir.path()).unwrap();
            while !b_alive(&peers) && t.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(5));
                peers = rulka_shm::attached_peers(dir.path()).unwrap();
            }
            assert!(b_alive(&peers), "{peers:?}");
            assert!(
                peers.iter().any(|p| p.segment == "ring-a"
                    && p.role == "consumer"
                    && p.liveness == Liveness::Alive(std::process::id())),
                "{peers:?}"
            );
        }
        kill(&mut child.0);
        if run == kills {
            let peers = rulka_shm::attached_peers(dir.path()).unwrap();
            let a_producer = peers.iter().find(|p| p.segment == "ring-a" && p.role == "producer");
            assert!(a_producer.is_none_or(|p| p.liveness == Liveness::Dead), "{peers:?}");
        }
        // Dead, or Absent if it was killed before it ever attached: never Alive.
        let liveness = a.producer().unwrap();
        assert!(
            matches!(liveness, Liveness::Dead | Liveness::Absent),
            "a killed producer reads {liveness:?}"
        );
        // Everything committed before the kill is still there, in order.
        while a.pop(&mut abuf) {
            let (r, k) = check_record(&abuf);
            assert_eq!((r, k), (run, next_k), "gap after kill in run {run}");
            next_k += 1;
        }
        let s = a.stats();
        assert_eq!(s.committed, s.consumed, "committed records were not all delivered");
        received_a += u64::from(next_k);
        let before = next_b;
        pop_b(&mut b, &mut next_b);
        let _ = before;
    }
    // B kept flowing the whole time.
    let t = Instant::now();
    while next_b < 1000 && t.elapsed() < Duration::from_secs(120) {
        pop_b(&mut b, &mut next_b);
    }
    assert!(next_b >= 1000, "collector B stalled at {next_b} records");
    // Some children are killed during start-up, before attaching: that is part of the
    // test. Every even run attached (it committed a record before its kill).
    let generation = a.stats().producer_generation;
    assert!(
        generation <= u64::from(kills) && generation >= u64::from(kills) / 2,
        "{generation} of {kills} attached"
    );
    kill(&mut child_b.0);
    println!("{kills} kills; {received_a} records from killed collectors, {next_b} from the survivor; all intact and contiguous");
    assert!(received_a >= u64::from(kills / 2), "every even run delivered its first record");
}

#[test]
fn learner_killed_mid_publish_leaves_the_previous_snapshot() {
    let dir = shm_dir();
    let pids = Arc::new(Mutex::new(Vec::new()));
    let _dog = Watchdog::new("publisher kill test", Duration::from_secs(240), pids.clone());
    let spec = board_spec(dir.path());
    let mut rng = Rng(7);
    let mut buf = Vec::new();
    let mut last_version = 0u64;
    let mut reader: Option<BoardReader> = None;
    for round in 0..100u64 {
        let mut child = KillOnDrop(spawn("publisher", dir.path(), &[], &pids));
        let r = loop {
            if let Some(r) = &reader {
                break r;
            }
            // No time bound while the first publisher starts (the watchdog has one):
            // a slow or busy machine only makes this take longer.
            match BoardReader::open(&spec, Duration::from_secs(5)) {
                Ok(r) => reader = Some(r),
                Err(ShmError::NotFound { .. } | ShmError::InitializationNotYetFinalized { .. }) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        };
        // Wait for this child's first snapshot (a version above everything seen), so
        // every round kills a publisher that is publishing, however slowly it started.
        loop {
            match r.read(&mut buf) {
                Some(info) if info.version > last_version => {
                    assert_eq!(buf.len(), snapshot_len(info.version));
                    last_version = info.version;
                    break;
                }
                _ => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        assert!(last_version > round, "round {round}: board at {last_version}");
        // Read while it publishes, then kill it at a random point.
        let deadline = Instant::now() + Duration::from_micros(1000 + rng.below(20_000));
        while Instant::now() < deadline {
            if let Some(info) = r.read(&mut buf) {
                assert!(
                    buf.iter().all(|&x| x == (info.version % 251) as u8),
                    "torn snapshot {}",
                    info.version
                );
                assert_eq!(buf.len(), snapshot_len(info.version));
            }
        }
        kill(&mut child.0);
        assert!(!matches!(r.writer().unwrap(), Liveness::Alive(_)), "a killed writer reads alive");
        // The current snapshot is complete and no older than anything seen.
        if let Some(info) = r.read(&mut buf) {
            assert!(
                buf.iter().all(|&x| x == (info.version % 251) as u8),
                "torn snapshot after kill"
            );
            assert_eq!(buf.len(), snapshot_len(info.version));
            assert!(
                info.version >= last_version,
                "board went back from {last_version} to {}",
                info.version
            );
            last_version = info.version;
        }
    }
    // Each of the 100 publishers published at least once before its kill.
    assert!(last_version >= 100, "board at {last_version} after 100 publishers");
    println!("100 publisher kills; board at version {last_version}, always complete");
}

/// A producer frozen (SIGSTOP) at random moments — most of them in the middle
/// of copying an 8 MiB record — exposes nothing of the record it is writing:
/// every pop while it is frozen returns a whole record or "empty", and
/// returns (a record committed before it is written would either tear or
/// keep `pop` spinning on its slot; both fail here by assertion, not by the
/// watchdog). 40 freezes, each checked, and after each thaw the producer
/// writes a record before the next freeze.
#[test]
fn a_producer_frozen_mid_record_exposes_nothing_of_it() {
    use rulka_shm::{AtomicU64, Ordering};
    let dir = shm_dir();
    let pids = Arc::new(Mutex::new(Vec::new()));
    let _dog = Watchdog::new("frozen producer test", Duration::from_secs(240), pids.clone());
    let spec = RingSpec::new(dir.path(), "ring-big", RUN, Schema::default(), 4, BIG_RECORD);
    let mut consumer = RingConsumer::create(&spec).unwrap();
    let mut child = KillOnDrop(spawn("big-producer", dir.path(), &[], &pids));
    let pid = child.0.id() as i32;
    // The consumer pops on its own thread: `empties` counts the pops that came
    // back with nothing, `records` the whole records seen.
    let empties = Arc::new(AtomicU64::new(0));
    let records = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicU64::new(0));
    let (e2, r2, s2) = (empties.clone(), records.clone(), stop.clone());
    let popper = std::thread::spawn(move || {
        let (mut buf, mut next) = (Vec::new(), 0u32);
        while s2.load(Ordering::Relaxed) == 0 {
            if consumer.pop(&mut buf) {
                let fill = (next % 251) as u8;
                let n = buf.len();
                let whole = n == BIG_RECORD
                    && buf[..4] == next.to_le_bytes()
                    && buf[n - 4..] == next.to_le_bytes()
                    && buf[4..n - 4].iter().all(|&b| b == fill);
                if !whole {
                    let head = u32::from_le_bytes(buf[..4].try_into().unwrap());
                    let tail = u32::from_le_bytes(buf[buf.len() - 4..].try_into().unwrap());
                    return Err(format!(
                        "record {next}: got {} bytes, starting as record {head} and ending as record {tail}",
                        buf.len()
                    ));
                }
                next += 1;
                r2.fetch_add(1, Ordering::Relaxed);
            } else {
                e2.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        Ok(next)
    });
    // Its first record: the producer is up and writing.
    while records.load(Ordering::Relaxed) == 0 {
        assert!(!popper.is_finished(), "{:?}", popper.join());
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut rng = Rng(99);
    for freeze in 0..40 {
        std::thread::sleep(Duration::from_micros(500 + rng.below(15_000)));
        // SAFETY: signals a child this test started and has not reaped.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(5));
        let e0 = empties.load(Ordering::Relaxed);
        let t0 = Instant::now();
        while empties.load(Ordering::Relaxed) < e0 + 3 {
            assert!(!popper.is_finished(), "freeze {freeze}: {:?}", popper.join());
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "freeze {freeze}: pop never came back while the producer was frozen: a record was committed before it was written"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        // The thawed producer writes again before the next freeze: on a slow
        // machine a fixed sleep could freeze it before it finished one record.
        let (r0, t0) = (records.load(Ordering::Relaxed), Instant::now());
        while records.load(Ordering::Relaxed) == r0 {
            assert!(!popper.is_finished(), "freeze {freeze}: {:?}", popper.join());
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "freeze {freeze}: the thawed producer wrote nothing in 20 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    kill(&mut child.0);
    stop.store(1, Ordering::Relaxed);
    let got = popper.join().unwrap().unwrap_or_else(|e| panic!("torn record: {e}"));
    println!("40 freezes of a producer of 8 MiB records; {got} records, all whole");
    assert!(got >= 40, "the producer wrote only {got} records between 40 freezes");
}
