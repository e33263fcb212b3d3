//! Weight snapshots over NATS: the trainer's [`WeightSink`] (object store
//! and `latest` key) and the collector's [`WeightSource`] (watch, fetch, check).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{kv, object_store};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use crate::{TransportError, WeightSink, WeightSource};

use super::*;

/// The trainer's weight sink over NATS.
pub struct NatsWeights {
    link: NatsLink,
    kv: kv::Store,
    objects: object_store::ObjectStore,
    network_hash: String,
    epoch: u64,
    kept: VecDeque<String>,
}

impl std::fmt::Debug for NatsWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsWeights")
            .field("epoch", &self.epoch)
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

impl NatsWeights {
    /// The sink putting snapshots of trainer `epoch` into `objects` and
    /// their `latest` record into `kv`.
    pub(super) fn new(
        link: NatsLink,
        (kv, objects): (kv::Store, object_store::ObjectStore),
        network_hash: &str,
        epoch: u64,
    ) -> Self {
        Self {
            link,
            kv,
            objects,
            network_hash: network_hash.to_string(),
            epoch,
            kept: VecDeque::new(),
        }
    }
}

impl WeightSink for NatsWeights {
    fn publish(&mut self, version: u64, bytes: &[u8]) -> Result<(), TransportError> {
        let op = format!("publishing weights v{version}");
        self.link.ensure_connected(&op)?;
        let name = format!("weights-e{:04}-v{version:012}", self.epoch);
        let latest = LatestWeights {
            version,
            name: name.clone(),
            sha256: hex::encode(Sha256::digest(bytes)),
            size: bytes.len(),
            network_hash: self.network_hash.clone(),
            epoch: self.epoch,
        };
        let record =
            serde_json::to_vec(&latest).map_err(|e| TransportError::Invalid(e.to_string()))?;
        let (store, kv, n) = (&self.objects, &self.kv, &name);
        self.link.call(&op, transfer_deadline(bytes.len()), async move {
            store
                .put(n.as_str(), &mut &bytes[..])
                .await
                .map_err(|e| nats_err(&format!("storing weights v{version}"), e))?;
            kv.put("latest", record.into())
                .await
                .map_err(|e| nats_err("announcing the latest weights", e))?;
            Ok(())
        })?;
        self.kept.push_back(name);
        if self.kept.len() > WEIGHT_VERSIONS_KEPT {
            let old: Vec<String> =
                self.kept.drain(..self.kept.len() - WEIGHT_VERSIONS_KEPT).collect();
            let store = &self.objects;
            // Best effort: a left-over object costs space, not correctness.
            let _ = self.link.call("deleting old weights", API_DEADLINE, async move {
                for o in old {
                    let _ = store.delete(o.as_str()).await;
                }
                Ok(())
            });
        }
        Ok(())
    }
}

/// A collector's weight source over NATS.
pub struct NatsWeightSource {
    link: NatsLink,
    names: NatsRunNames,
    rx: tokio::sync::watch::Receiver<Option<LatestWeights>>,
    watcher: tokio::task::JoinHandle<()>,
    failed: Option<((u64, u64), Instant)>,
    /// `(epoch, version)` of the last snapshot returned.
    delivered: Option<(u64, u64)>,
    alive: Arc<std::sync::Mutex<CollectorAlive>>,
}

impl std::fmt::Debug for NatsWeightSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsWeightSource").field("run", &self.names.run).finish_non_exhaustive()
    }
}

impl Drop for NatsWeightSource {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

impl NatsWeightSource {
    /// The source reading `latest` through `rx`, which `watcher` feeds.
    pub(super) fn new(
        link: NatsLink,
        names: NatsRunNames,
        (rx, watcher): (
            tokio::sync::watch::Receiver<Option<LatestWeights>>,
            tokio::task::JoinHandle<()>,
        ),
        alive: Arc<std::sync::Mutex<CollectorAlive>>,
    ) -> Self {
        Self { link, names, rx, watcher, failed: None, delivered: None, alive }
    }

    /// The newest snapshot announced so far.
    pub fn latest(&self) -> Option<LatestWeights> {
        self.rx.borrow().clone()
    }

    /// `(epoch, version)` of the last snapshot returned.
    pub fn delivered(&self) -> Option<(u64, u64)> {
        self.delivered
    }
}

impl WeightSource for NatsWeightSource {
    fn wait_newer(
        &mut self,
        current: Option<u64>,
        out: &mut Vec<u8>,
        timeout: Duration,
    ) -> Result<Option<u64>, TransportError> {
        let rx = self.rx.clone();
        let (failed, delivered) = (self.failed, self.delivered);
        // What this source returned itself decides (it knows the epochs);
        // before its first, the caller's version.
        let newer = move |l: &Option<LatestWeights>| {
            l.as_ref()
                .filter(|l| match delivered {
                    Some(d) => l.supersedes(Some(d)),
                    None => current.is_none_or(|c| l.version > c),
                })
                .filter(|l| {
                    failed.is_none_or(|(k, at)| {
                        k != (l.epoch, l.version) || at.elapsed() > Duration::from_secs(1)
                    })
                })
                .cloned()
        };
        let mut rx2 = rx.clone();
        let latest = self.link.call(
            "waiting for weights",
            timeout + Duration::from_secs(1),
            async move {
                let deadline = tokio::time::Instant::now() + timeout;
                loop {
                    if let Some(l) = newer(&rx2.borrow()) {
                        return Ok(Some(l));
                    }
                    match tokio::time::timeout_at(deadline, rx2.changed()).await {
                        Ok(Ok(())) => {}
                        _ => return Ok(None),
                    }
                }
            },
        )?;
        let Some(latest) = latest else { return Ok(None) };
        let (l, n, name) = (&self.link, &self.names, latest.name.as_str());
        let fetched =
            self.link.call("fetching weights", transfer_deadline(latest.size), async move {
                let store = l.objects(n).await?;
                let mut o =
                    store.get(name).await.map_err(|e| nats_err(&format!("fetching {name}"), e))?;
                let mut buf = Vec::new();
                o.read_to_end(&mut buf)
                    .await
                    .map_err(|e| nats_err(&format!("reading {name}"), e))?;
                Ok(buf)
            });
        let problem = match fetched {
            Ok(buf) if buf.len() != latest.size => {
                Some(format!("{} bytes, announced {}", buf.len(), latest.size))
            }
            Ok(buf) if hex::encode(Sha256::digest(&buf)) != latest.sha256 => {
                Some("SHA-256 differs from the announced one".into())
            }
            Ok(buf) => {
                *out = buf;
                self.failed = None;
                if let Some((e, v)) = self.delivered.filter(|&(e, _)| e < latest.epoch) {
                    tracing::info!(
                        "[rulka transport] weights v{} of trainer epoch {} (a restarted trainer): taken in place of v{v} of epoch {e}",
                        latest.version, latest.epoch
                    );
                }
                self.delivered = Some((latest.epoch, latest.version));
                if let Ok(mut a) = self.alive.lock() {
                    a.weights = self.delivered;
                }
                return Ok(Some(latest.version));
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(p) = problem {
            tracing::warn!(
                "[rulka transport] weights v{} (trainer epoch {}): {p}; keeping the current weights",
                latest.version, latest.epoch
            );
            self.failed = Some(((latest.epoch, latest.version), Instant::now()));
        }
        Ok(None)
    }
}
