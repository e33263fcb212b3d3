//! A collector's side of a run: joining it (the run record checked, an
//! incarnation counted), maps, and its `alive.<id>` record.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use futures::StreamExt;
use rulka_shm::ChunkLayout;
use tokio::io::AsyncReadExt;

use crate::TransportError;

use super::*;

// ---------------------------------------------------------------- collector --

/// A collector's view of a run on a NATS server.
#[derive(Debug)]
pub struct NatsCollector {
    link: NatsLink,
    names: NatsRunNames,
    record: RunRecord,
    kv: kv::Store,
    /// Shared with the chunk sink and the weight source: what `alive.<id>` says.
    alive: Arc<std::sync::Mutex<CollectorAlive>>,
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "?".into())
}

impl NatsCollector {
    /// Joins run `run`: reads its record (the run must exist: the trainer
    /// creates it), waiting up to `wait` for it to appear.
    pub fn join(link: NatsLink, run: &str, wait: Duration) -> Result<Self, TransportError> {
        let names = NatsRunNames::new(run)?;
        let (l, n) = (&link, &names);
        let (kv, record) = link.call("joining the run", wait + API_DEADLINE, async move {
            let deadline = Instant::now() + wait;
            loop {
                let attempt = async {
                    let kv = l.kv(n).await?;
                    let v =
                        kv.get("run").await.map_err(|e| nats_err("reading the run record", e))?;
                    let v = v.ok_or_else(|| TransportError::NoRun {
                        run: n.run.clone(),
                        url: l.url.clone(),
                        message: "no run record (is its trainer started?)".into(),
                    })?;
                    Ok::<_, TransportError>((kv, v))
                };
                match attempt.await {
                    Ok((kv, b)) => {
                        let record = serde_json::from_slice::<RunRecord>(&b).map_err(|e| {
                            TransportError::Invalid(format!(
                                "run {}: unreadable run record: {e}",
                                n.run
                            ))
                        })?;
                        return Ok((kv, record));
                    }
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    Err(e) if e.is_bad_input() || e.is_connection() => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        })?;
        let alive = CollectorAlive {
            host: host_name(),
            pid: std::process::id(),
            ..CollectorAlive::default()
        };
        Ok(Self { link, names, record, kv, alive: Arc::new(std::sync::Mutex::new(alive)) })
    }

    /// The run's record (its config among others).
    pub fn record(&self) -> &RunRecord {
        &self.record
    }

    /// The connection (for its status, and where its news goes).
    pub fn link(&self) -> &NatsLink {
        &self.link
    }

    /// Refuses a run whose record schema or network differs from this
    /// process's (`what` names the pair in the error).
    pub fn check(&self, schema_hash: &str, network_hash: &str) -> Result<(), TransportError> {
        for (what, theirs, ours) in [
            ("the chunk record schema", &self.record.schema_hash, schema_hash),
            ("the network", &self.record.network_hash, network_hash),
        ] {
            if theirs != ours {
                return Err(TransportError::SchemaMismatch {
                    run: self.names.run.clone(),
                    what: what.into(),
                    theirs: theirs.clone(),
                    ours: ours.to_string(),
                });
            }
        }
        Ok(())
    }

    /// The next incarnation of collector slot `id` (0 on its first start),
    /// counted on the server with compare-and-set.
    pub fn next_incarnation(&self, id: u32) -> Result<u32, TransportError> {
        let kv = &self.kv;
        let key = format!("incarnation.{id}");
        self.link.call("counting incarnations", API_DEADLINE * 2, async move {
            next_count(kv, &key).await
        })
    }

    /// Downloads a file from the run's object store.
    pub fn get_object(&self, name: &str) -> Result<Vec<u8>, TransportError> {
        let (l, n) = (&self.link, &self.names);
        self.link.call(&format!("fetching {name}"), transfer_deadline(64 << 20), async move {
            let store = l.objects(n).await?;
            let mut o =
                store.get(name).await.map_err(|e| nats_err(&format!("fetching {name}"), e))?;
            let mut out = Vec::new();
            o.read_to_end(&mut out).await.map_err(|e| nats_err(&format!("reading {name}"), e))?;
            Ok(out)
        })
    }

    /// The chunk sink of collector `id` in `incarnation`: chunks the server
    /// cannot take now wait in an outbox of up to `outbox_bytes`. Starts
    /// the collector's `alive.<id>` record.
    pub fn chunk_sink(
        &self,
        id: u32,
        incarnation: u32,
        layout: ChunkLayout,
        block: Option<Duration>,
        outbox_bytes: usize,
    ) -> NatsChunkSink {
        if let Ok(mut a) = self.alive.lock() {
            a.id = id;
            a.incarnation = incarnation;
        }
        let (kv, alive) = (self.kv.clone(), Arc::downgrade(&self.alive));
        let key = format!("alive.{id}");
        // A game's counters changing put the record at once, not at the next beat.
        let now = Arc::new(tokio::sync::Notify::new());
        let wake = now.clone();
        self.link.rt.spawn(async move {
            loop {
                let Some(a) = alive.upgrade() else { return };
                let record = a.lock().ok().and_then(|a| serde_json::to_vec(&*a).ok());
                drop(a);
                if let Some(r) = record {
                    let _ =
                        tokio::time::timeout(API_DEADLINE, kv.put(key.as_str(), r.into())).await;
                }
                let _ = tokio::time::timeout(ALIVE_EVERY, wake.notified()).await;
            }
        });
        NatsChunkSink::new(
            self.link.clone(),
            (self.names.subject(id), self.names.run.clone(), incarnation),
            layout,
            block,
            outbox_bytes,
            (self.alive.clone(), now),
        )
    }

    /// The weight source of this run (a watch on the `latest` record).
    pub fn weight_source(&self) -> Result<NatsWeightSource, TransportError> {
        let (tx, rx) = tokio::sync::watch::channel::<Option<LatestWeights>>(None);
        // The task holds no `NatsLink`: the runtime must never be dropped from inside itself.
        let kv = self.kv.clone();
        let offer =
            move |latest: LatestWeights, tx: &tokio::sync::watch::Sender<Option<LatestWeights>>| {
                let held = tx.borrow().as_ref().map(|c| (c.epoch, c.version));
                if latest.supersedes(held) {
                    let _ = tx.send(Some(latest));
                }
            };
        let watcher = self.link.rt.spawn(async move {
            let read = |kv: kv::Store| async move {
                match tokio::time::timeout(API_DEADLINE, kv.get("latest")).await {
                    Ok(Ok(Some(v))) => serde_json::from_slice::<LatestWeights>(&v).ok(),
                    _ => None,
                }
            };
            loop {
                // The record's watch, with a direct read whenever it has been
                // quiet for a second (a restarted server, or a watch that
                // silently stopped, costs at most that), re-made every 10 s.
                if let Some(l) = read(kv.clone()).await {
                    offer(l, &tx);
                }
                match tokio::time::timeout(API_DEADLINE, kv.watch("latest")).await {
                    Ok(Ok(mut w)) => {
                        let until = tokio::time::Instant::now() + Duration::from_secs(10);
                        while tokio::time::Instant::now() < until {
                            match tokio::time::timeout(Duration::from_secs(1), w.next()).await {
                                Ok(Some(Ok(e))) => {
                                    if let Ok(l) = serde_json::from_slice::<LatestWeights>(&e.value)
                                    {
                                        offer(l, &tx);
                                    }
                                }
                                Ok(_) => break,
                                Err(_) => {
                                    if let Some(l) = read(kv.clone()).await {
                                        offer(l, &tx);
                                    }
                                }
                            }
                        }
                    }
                    _ => tokio::time::sleep(Duration::from_millis(500)).await,
                }
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(NatsWeightSource::new(
            self.link.clone(),
            self.names.clone(),
            (rx, watcher),
            self.alive.clone(),
        ))
    }
}
