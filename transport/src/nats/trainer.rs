//! The trainer's side of a run: creating its stream, consumer, bucket and
//! object store; its epoch; the collectors' `alive.<id>` records.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{consumer, kv, object_store, stream};
use futures::StreamExt;
use rulka_shm::ChunkLayout;

use crate::TransportError;

use super::*;

// ------------------------------------------------------------------ trainer --

/// Settings of a run's stream and consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// The trajectory stream's size cap, bytes (full: `discard: new`).
    pub max_bytes: i64,
    /// Chunks one collector may have in the stream (its subject), like a
    /// shared-memory ring's capacity; -1: no limit. Must hold a whole
    /// trajectory: the trainer acknowledges a trajectory's chunks only once
    /// it has all of them.
    pub max_per_collector: i64,
    /// How long the server waits for an ack before redelivering a chunk.
    pub ack_wait: Duration,
}

/// The trainer's side of a run: creates (or re-opens) the run's stream,
/// consumer, bucket and object store, and publishes the run record.
pub struct NatsTrainer {
    link: NatsLink,
    names: NatsRunNames,
    kv: kv::Store,
    objects: object_store::ObjectStore,
    epoch: u64,
}

impl std::fmt::Debug for NatsTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsTrainer")
            .field("run", &self.names.run)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl NatsTrainer {
    /// Creates the run's resources if needed (a restarted trainer re-opens
    /// them: unacknowledged chunks are delivered again), writes `record` and
    /// counts this trainer's incarnation (its epoch). `fresh` first deletes
    /// whatever a previous run of the same name left (its stream, bucket and
    /// object store).
    pub fn open(
        link: NatsLink,
        record: &RunRecord,
        limits: StreamLimits,
        fresh: bool,
    ) -> Result<Self, TransportError> {
        let names = NatsRunNames::new(&record.run)?;
        let rec = serde_json::to_vec(record).map_err(|e| TransportError::Invalid(e.to_string()))?;
        let (l, n) = (&link, &names);
        let (kv, objects, epoch) =
            link.call("opening the run", Duration::from_secs(30), async move {
                // A fresh start of the same run name still counts on from the
                // previous trainer's epoch: its collectors must take the new weights.
                let mut previous_epoch = None;
                if fresh {
                    if let Ok(kv) = l.js.get_key_value(&n.kv).await {
                        if let Ok(Some(v)) = kv.get(EPOCH_KEY).await {
                            previous_epoch =
                                std::str::from_utf8(&v).ok().and_then(|s| s.parse::<u32>().ok());
                        }
                    }
                    let _ = l.js.delete_stream(&n.stream).await;
                    let _ = l.js.delete_key_value(&n.kv).await;
                    let _ = l.js.delete_object_store(&n.objects).await;
                }
                l.js.get_or_create_stream(stream::Config {
                    name: n.stream.clone(),
                    subjects: vec![n.subjects()],
                    retention: stream::RetentionPolicy::WorkQueue,
                    storage: stream::StorageType::File,
                    max_bytes: limits.max_bytes,
                    max_messages_per_subject: limits.max_per_collector,
                    discard: stream::DiscardPolicy::New,
                    discard_new_per_subject: limits.max_per_collector > 0,
                    // A collector's outbox may resend a chunk long after its first
                    // try: the server still knows the id for this long.
                    duplicate_window: Duration::from_secs(600),
                    ..Default::default()
                })
                .await
                .map_err(|e| nats_err("creating the trajectory stream", e))?;
                let kv =
                    l.js.create_or_update_key_value(kv::Config {
                        bucket: n.kv.clone(),
                        history: 1,
                        storage: stream::StorageType::File,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| nats_err("creating the run's key-value bucket", e))?;
                let objects =
                    l.js.create_object_store(object_store::Config {
                        bucket: n.objects.clone(),
                        storage: stream::StorageType::File,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| nats_err("creating the run's object store", e))?;
                kv.put("run", rec.into())
                    .await
                    .map_err(|e| nats_err("writing the run record", e))?;
                if let Some(e) = previous_epoch {
                    kv.put(EPOCH_KEY, e.to_string().into())
                        .await
                        .map_err(|e| nats_err("carrying the trainer epoch over", e))?;
                }
                let epoch = next_count(&kv, EPOCH_KEY).await?;
                Ok::<_, TransportError>((kv, objects, u64::from(epoch)))
            })?;
        Ok(Self { link, names, kv, objects, epoch })
    }

    /// The run's names.
    pub fn names(&self) -> &NatsRunNames {
        &self.names
    }

    /// This trainer's incarnation on the run (0 for its first start).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The connection (for its status, and where its news goes).
    pub fn link(&self) -> &NatsLink {
        &self.link
    }

    /// Stores a file (e.g. a map's zone centres) in the run's object store.
    pub fn put_object(&self, name: &str, bytes: &[u8]) -> Result<(), TransportError> {
        let store = &self.objects;
        self.link.call(&format!("storing {name}"), transfer_deadline(bytes.len()), async move {
            store
                .put(name, &mut &bytes[..])
                .await
                .map_err(|e| nats_err(&format!("storing {name}"), e))?;
            Ok(())
        })
    }

    /// The trajectory source for this run: the durable pull consumer
    /// `trainer` (re-created, so that whatever a previous trainer pulled
    /// without taking comes again at once), chunks of `layout`.
    pub fn rollouts(
        &self,
        layout: ChunkLayout,
        limits: StreamLimits,
    ) -> Result<NatsRollouts, TransportError> {
        let (l, n) = (&self.link, &self.names);
        let consumer =
            self.link.call("creating the trainer's consumer", API_DEADLINE * 3, async move {
                let stream =
                    l.js.get_stream(&n.stream)
                        .await
                        .map_err(|e| nats_err("opening the trajectory stream", e))?;
                // A fresh consumer each start: chunks the previous trainer had pulled
                // but not acknowledged come again at once, not after the ack wait
                // (acknowledged ones are gone from the work queue).
                let _ = stream.delete_consumer("trainer").await;
                stream
                    .get_or_create_consumer(
                        "trainer",
                        consumer::pull::Config {
                            durable_name: Some("trainer".into()),
                            ack_policy: consumer::AckPolicy::Explicit,
                            ack_wait: limits.ack_wait,
                            max_ack_pending: 1_000_000,
                            ..Default::default()
                        },
                    )
                    .await
                    .map_err(|e| nats_err("creating the trainer's consumer", e))
            })?;
        Ok(NatsRollouts::new(self.link.clone(), consumer, layout, limits.ack_wait))
    }

    /// The weight sink for this run (its records carry this trainer's epoch).
    pub fn weights(&self, network_hash: &str) -> NatsWeights {
        NatsWeights::new(
            self.link.clone(),
            (self.kv.clone(), self.objects.clone()),
            network_hash,
            self.epoch,
        )
    }

    /// What the run's collectors say about themselves (`alive.<id>`),
    /// refreshed every [`ALIVE_EVERY`] on the link's runtime.
    pub fn remote_collectors(&self) -> RemoteCollectors {
        let seen: Arc<std::sync::Mutex<BTreeMap<u32, Heard>>> = Arc::default();
        let (kv, s) = (self.kv.clone(), Arc::downgrade(&seen));
        self.link.rt.spawn(async move {
            loop {
                let Some(seen) = s.upgrade() else { return };
                let read = async {
                    let mut keys = kv.keys().await.map_err(|e| e.to_string())?;
                    let mut found = Vec::new();
                    while let Some(k) = keys.next().await {
                        let Ok(k) = k else { break };
                        if let Some(id) =
                            k.strip_prefix("alive.").and_then(|i| i.parse::<u32>().ok())
                        {
                            if let Ok(Some(e)) = kv.entry(k.as_str()).await {
                                if let Ok(a) = serde_json::from_slice::<CollectorAlive>(&e.value) {
                                    let created: std::time::SystemTime = e.created.into();
                                    let age = created.elapsed().unwrap_or_default();
                                    found.push((id, e.revision, a, age));
                                }
                            }
                        }
                    }
                    Ok::<_, String>(found)
                };
                if let Ok(Ok(found)) = tokio::time::timeout(API_DEADLINE * 2, read).await {
                    if let Ok(mut map) = seen.lock() {
                        for (id, revision, alive, age) in found {
                            // First heard: as old as the record (a dead collector's
                            // last record is not news); later: when it changed.
                            let at = match map.get(&id) {
                                Some(h) if h.revision == revision => continue,
                                Some(_) => Instant::now(),
                                None => {
                                    Instant::now().checked_sub(age).unwrap_or_else(Instant::now)
                                }
                            };
                            map.insert(id, Heard { alive, revision, at });
                        }
                    }
                }
                drop(seen);
                tokio::time::sleep(ALIVE_EVERY).await;
            }
        });
        RemoteCollectors { seen }
    }
}

/// The last `alive.<id>` record heard from a collector.
#[derive(Debug, Clone)]
struct Heard {
    alive: CollectorAlive,
    revision: u64,
    at: Instant,
}

/// The trainer's view of its run's collectors, from their `alive.<id>` records.
#[derive(Debug, Clone)]
pub struct RemoteCollectors {
    seen: Arc<std::sync::Mutex<BTreeMap<u32, Heard>>>,
}

impl RemoteCollectors {
    /// Every collector heard from: its last record and how long ago it came.
    pub fn heard(&self) -> Vec<(CollectorAlive, Duration)> {
        self.seen
            .lock()
            .map(|m| m.values().map(|h| (h.alive.clone(), h.at.elapsed())).collect())
            .unwrap_or_default()
    }
}
