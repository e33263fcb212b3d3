//! Weight snapshots published off the learner's thread (NATS): the learner
//! hands each snapshot over and goes on; a thread publishes the newest one
//! (an older snapshot not yet started is superseded: collectors want only
//! the newest), and retries the last one that failed until a newer one
//! comes. The learner never waits on the network.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rulka_transport::{TransportError, WeightSink};

/// Counters of a [`BackgroundPublisher`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PublishStats {
    /// Snapshots published.
    pub published: u64,
    /// Snapshots replaced by a newer one before their turn.
    pub superseded: u64,
    /// Attempts that failed (retried, or superseded).
    pub failures: u64,
    /// The newest version published.
    pub last_version: Option<u64>,
}

#[derive(Debug, Default)]
struct Slot {
    next: Option<(u64, Vec<u8>)>,
    retry_at: Option<Instant>,
    stop: bool,
    stats: PublishStats,
    last_said: Option<Instant>,
}

/// A [`WeightSink`] that publishes through another sink on a thread of its own.
pub struct BackgroundPublisher {
    shared: Arc<(Mutex<Slot>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for BackgroundPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundPublisher").field("stats", &self.stats()).finish_non_exhaustive()
    }
}

/// How long a failed snapshot waits before it is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(2);
/// Failures are said at most this often.
const SAY_EVERY: Duration = Duration::from_secs(30);

impl BackgroundPublisher {
    /// Publishes through `sink` on a new thread; `say` receives the
    /// (rate-limited) reports of failed publishes.
    pub fn new(mut sink: Box<dyn WeightSink>, say: impl Fn(&str) + Send + 'static) -> Self {
        let shared = Arc::new((Mutex::new(Slot::default()), Condvar::new()));
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("weight-publisher".into())
            .spawn(move || {
                let (lock, cv) = &*s;
                loop {
                    let (version, bytes) = {
                        let Ok(mut slot) = lock.lock() else { return };
                        loop {
                            if slot.stop {
                                return;
                            }
                            let due = slot.retry_at.is_none_or(|t| Instant::now() >= t);
                            if slot.next.is_some() && due {
                                break;
                            }
                            let wait = slot
                                .retry_at
                                .map_or(Duration::from_secs(1), |t| t.saturating_duration_since(Instant::now()))
                                .max(Duration::from_millis(10));
                            slot = match cv.wait_timeout(slot, wait) {
                                Ok((g, _)) => g,
                                Err(_) => return,
                            };
                        }
                        slot.retry_at = None;
                        match slot.next.take() {
                            Some(n) => n,
                            None => continue,
                        }
                    };
                    let r = sink.publish(version, &bytes);
                    let Ok(mut slot) = lock.lock() else { return };
                    match r {
                        Ok(()) => {
                            slot.stats.published += 1;
                            slot.stats.last_version = Some(version);
                        }
                        Err(e) => {
                            slot.stats.failures += 1;
                            // Keep it for a retry unless a newer one came meanwhile.
                            if slot.next.is_none() {
                                slot.next = Some((version, bytes));
                                slot.retry_at = Some(Instant::now() + RETRY_AFTER);
                            }
                            // An unreachable server is said by the connection itself.
                            let quiet = matches!(e, TransportError::Unreachable { .. });
                            if !quiet && slot.last_said.is_none_or(|t| t.elapsed() >= SAY_EVERY) {
                                slot.last_said = Some(Instant::now());
                                say(&format!(
                                    "publishing weights v{version}: {e}; retrying every {} s until it works or newer weights come",
                                    RETRY_AFTER.as_secs()
                                ));
                            }
                        }
                    }
                }
            })
            .ok();
        Self { shared, thread }
    }

    /// Counters so far.
    pub fn stats(&self) -> PublishStats {
        self.shared.0.lock().map(|s| s.stats).unwrap_or_default()
    }

    /// A handle that reads the counters while the publisher is elsewhere.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(self.shared.clone())
    }

    /// Stops the thread: a publish in progress gets up to `grace` to end
    /// (then it is left behind; the process is ending).
    pub fn close(&mut self, grace: Duration) {
        if let Ok(mut s) = self.shared.0.lock() {
            s.stop = true;
        }
        self.shared.1.notify_all();
        let Some(t) = self.thread.take() else { return };
        let t0 = Instant::now();
        while !t.is_finished() && t0.elapsed() < grace {
            std::thread::sleep(Duration::from_millis(10));
        }
        if t.is_finished() {
            let _ = t.join();
        }
    }
}

/// Reads a [`BackgroundPublisher`]'s counters.
#[derive(Clone)]
pub struct StatsHandle(Arc<(Mutex<Slot>, Condvar)>);

impl std::fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StatsHandle").field(&self.stats()).finish()
    }
}

impl StatsHandle {
    /// Counters so far.
    pub fn stats(&self) -> PublishStats {
        self.0 .0.lock().map(|s| s.stats).unwrap_or_default()
    }
}

impl WeightSink for BackgroundPublisher {
    /// Hands the snapshot over (never waits on the network; never fails).
    fn publish(&mut self, version: u64, bytes: &[u8]) -> Result<(), TransportError> {
        if let Ok(mut s) = self.shared.0.lock() {
            if s.next.replace((version, bytes.to_vec())).is_some() {
                s.stats.superseded += 1;
            }
            s.retry_at = None;
        }
        self.shared.1.notify_all();
        Ok(())
    }
}

impl Drop for BackgroundPublisher {
    /// A publish in progress gets up to 2 s.
    fn drop(&mut self) {
        self.close(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that fails its first `fail` publishes and records the rest.
    /// A sink that fails its first `fail` publishes; with a `gate`, each
    /// publish says it `started` and then waits for a token through the gate.
    struct Flaky {
        fail: u32,
        got: Arc<Mutex<Vec<u64>>>,
        gate: Option<Gate>,
    }

    type Gate = (std::sync::mpsc::Receiver<()>, Arc<Mutex<Vec<u64>>>);

    impl WeightSink for Flaky {
        fn publish(&mut self, version: u64, _: &[u8]) -> Result<(), TransportError> {
            if let Some((gate, started)) = &self.gate {
                started.lock().map_err(|_| TransportError::PeerGone)?.push(version);
                gate.recv().map_err(|_| TransportError::PeerGone)?;
            }
            if self.fail > 0 {
                self.fail -= 1;
                return Err(TransportError::Timeout {
                    op: "test".into(),
                    url: "nats://test".into(),
                    after: Duration::from_secs(1),
                });
            }
            self.got.lock().map_err(|_| TransportError::PeerGone)?.push(version);
            Ok(())
        }
    }

    fn wait_for(p: &BackgroundPublisher, published: u64) -> PublishStats {
        let t0 = Instant::now();
        while p.stats().published < published && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        p.stats()
    }

    #[test]
    fn a_failed_snapshot_is_retried_until_it_is_published() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let said = Arc::new(Mutex::new(Vec::<String>::new()));
        let s2 = said.clone();
        let sink = Flaky { fail: 2, got: got.clone(), gate: None };
        let mut p = BackgroundPublisher::new(Box::new(sink), move |m| {
            s2.lock().expect("lock").push(m.to_string())
        });
        p.publish(7, b"w").expect("hand over");
        let st = wait_for(&p, 1);
        assert_eq!((st.published, st.failures, st.last_version), (1, 2, Some(7)));
        assert_eq!(*got.lock().expect("lock"), vec![7]);
        // Two failures within 30 s: said once, as a timeout.
        let said = said.lock().expect("lock");
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("v7") && said[0].contains("timed out"), "{said:?}");
        p.close(Duration::from_secs(5));
    }

    #[test]
    fn snapshots_waiting_behind_a_slow_publish_are_superseded_by_the_newest() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let (open, gate) = std::sync::mpsc::channel();
        let started = Arc::new(Mutex::new(Vec::new()));
        let sink = Flaky { fail: 0, got: got.clone(), gate: Some((gate, started.clone())) };
        let mut p = BackgroundPublisher::new(Box::new(sink), |_| {});
        p.publish(1, b"a").expect("hand over");
        let t0 = Instant::now();
        while started.lock().expect("lock").is_empty() {
            assert!(t0.elapsed() < Duration::from_secs(20), "v1 never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        // v1 is being published (held at the gate) while 2..5 arrive.
        for v in 2..=5 {
            p.publish(v, b"b").expect("hand over");
        }
        open.send(()).expect("gate");
        open.send(()).expect("gate");
        let st = wait_for(&p, 2);
        assert_eq!(*started.lock().expect("lock"), vec![1, 5]);
        assert_eq!(*got.lock().expect("lock"), vec![1, 5], "the newest follows the one in flight");
        assert_eq!(st.superseded, 3);
        p.close(Duration::from_secs(5));
    }
}
