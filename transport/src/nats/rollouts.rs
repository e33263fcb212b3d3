//! The trainer's [`RolloutSource`]: chunks pulled from the run's stream,
//! whole trajectories handed over and acknowledged once the trainer has
//! recorded them ([`RolloutSource::commit`]), partial ones held until
//! complete or given up.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use async_nats::HeaderMap;
use futures::StreamExt;
use rulka_shm::{read_chunk, ChunkHeader, ChunkLayout, Steps, Trajectory, TrajectoryId};

use crate::{RolloutSource, SourceStats, TransportError};

use super::*;

/// One chunk held until its trajectory is complete.
struct HeldChunk {
    steps: Steps,
    header: ChunkHeader,
    message: jetstream::Message,
    since: Instant,
}

#[derive(Default)]
struct NatsPartial {
    chunks: BTreeMap<u64, HeldChunk>,
    /// When its last new chunk arrived.
    last_arrival: Option<Instant>,
}

/// The chunk sequence numbers (`Rulka-Seq`) of one collector incarnation:
/// the next expected, and those skipped so far that have not come since.
#[derive(Debug, Default)]
struct SeqTrack {
    next: u64,
    gaps: BTreeSet<u64>,
}

/// At most this many skipped sequence numbers are remembered per collector
/// incarnation (older ones count as lost).
const GAPS_KEPT: u64 = 4096;

impl NatsPartial {
    /// The steps in order when every chunk from step 0 to the last is held.
    fn complete(&self) -> bool {
        let mut next = 0u64;
        for (&first, c) in &self.chunks {
            if first != next {
                return false;
            }
            next = first + c.steps.len() as u64;
            if c.header.is_last {
                return true;
            }
        }
        false
    }
}

/// The trainer's trajectory source over NATS (see the module docs).
pub struct NatsRollouts {
    link: NatsLink,
    consumer: consumer::Consumer<consumer::pull::Config>,
    layout: ChunkLayout,
    schema: String,
    ack_wait: Duration,
    partials: HashMap<(u32, u64), NatsPartial>,
    /// The newest trajectory each collector has sent a chunk of.
    newest: HashMap<u32, u64>,
    taken: HashSet<(u32, u64)>,
    /// Trajectories dropped as incomplete: a chunk of theirs coming late is ignored.
    given_up: HashSet<(u32, u64)>,
    seqs: HashMap<(u32, u64), SeqTrack>,
    ready: Vec<((u32, u64), NatsPartial)>,
    /// Handed over, not yet acknowledged: each trajectory's chunk messages.
    unacked: Vec<((u32, u64), Vec<jetstream::Message>)>,
    stats: SourceStats,
    abandoned: Vec<(u32, u64)>,
}

impl std::fmt::Debug for NatsRollouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsRollouts")
            .field("partials", &self.partials.len())
            .finish_non_exhaustive()
    }
}

fn header_str<'a>(h: Option<&'a HeaderMap>, key: &str) -> Option<&'a str> {
    h.and_then(|h| h.get(key)).map(|v| v.as_str())
}

impl NatsRollouts {
    /// The source pulling `layout`'s chunks through `consumer`, whose
    /// unacknowledged messages come again after `ack_wait`.
    pub(super) fn new(
        link: NatsLink,
        consumer: consumer::Consumer<consumer::pull::Config>,
        layout: ChunkLayout,
        ack_wait: Duration,
    ) -> Self {
        Self {
            link,
            consumer,
            layout,
            schema: schema_hash(&layout),
            ack_wait,
            partials: HashMap::new(),
            newest: HashMap::new(),
            taken: HashSet::new(),
            given_up: HashSet::new(),
            seqs: HashMap::new(),
            ready: Vec::new(),
            unacked: Vec::new(),
            stats: SourceStats::default(),
            abandoned: Vec::new(),
        }
    }

    /// Chunks whose per-incarnation sequence number was skipped and has not
    /// come since (dropped by a collector under back-pressure, lost, or still
    /// on its way: a chunk delivered to a pull that timed out comes again
    /// after the ack wait, behind later ones).
    pub fn missing_chunks(&self) -> u64 {
        self.seqs.values().map(|t| t.gaps.len() as u64).sum()
    }

    /// Drops, as incomplete, the partial trajectories that can no longer
    /// complete: a later trajectory of their collector has begun, and either
    /// their collector incarnation has no chunk outstanding (every sequence
    /// number up to its newest has come), or the chunks outstanding had
    /// twice the ack wait to be delivered again and did not come.
    fn drop_dead_partials(&mut self) -> Vec<jetstream::Message> {
        let patience = self.ack_wait * 2;
        let dead: Vec<(u32, u64)> = self
            .partials
            .iter()
            .filter(|(k, p)| {
                let later = self.newest.get(&k.0).is_some_and(|&n| n > k.1);
                let inc = u64::from(TrajectoryId::unpack(k.0, k.1).incarnation);
                let outstanding = self.seqs.get(&(k.0, inc)).is_some_and(|t| !t.gaps.is_empty());
                let waited = p.last_arrival.is_none_or(|t| t.elapsed() >= patience);
                later && (!outstanding || waited)
            })
            .map(|(k, _)| *k)
            .collect();
        let mut acks = Vec::new();
        for k in dead {
            if let Some(p) = self.partials.remove(&k) {
                self.stats.incomplete_dropped += 1;
                self.abandoned.push(k);
                self.given_up.insert(k);
                acks.extend(p.chunks.into_values().map(|c| c.message));
            }
        }
        acks
    }

    /// Trajectories held incomplete now.
    pub fn partials(&self) -> usize {
        self.partials.len()
    }

    /// Handles one delivered chunk; a trajectory it completes moves to `ready`.
    fn accept(&mut self, m: jetstream::Message, acks: &mut Vec<jetstream::Message>) {
        let h = m.headers.as_ref();
        if header_str(h, H_SCHEMA) != Some(self.schema.as_str())
            || header_str(h, H_BYTE_ORDER) != Some("le")
        {
            self.stats.rejected += 1;
            acks.push(m);
            return;
        }
        let Ok((header, steps)) = read_chunk(&self.layout, &m.payload) else {
            self.stats.rejected += 1;
            acks.push(m);
            return;
        };
        let key = (header.collector, header.trajectory);
        let incarnation = u64::from(TrajectoryId::of(&header).incarnation);
        if let Some(seq) = header_str(h, H_SEQ).and_then(|s| s.parse::<u64>().ok()) {
            let t = self.seqs.entry((header.collector, incarnation)).or_default();
            if seq >= t.next {
                t.gaps.extend(t.next.max(seq.saturating_sub(GAPS_KEPT))..seq);
                t.next = seq + 1;
            } else {
                t.gaps.remove(&seq);
            }
        }
        if self.taken.contains(&key)
            || self.given_up.contains(&key)
            || self.ready.iter().any(|(k, _)| *k == key)
        {
            self.stats.repeats_ignored += 1;
            acks.push(m);
            return;
        }
        let newest = self.newest.entry(header.collector).or_insert(header.trajectory);
        *newest = (*newest).max(header.trajectory);
        let partial = self.partials.entry(key).or_default();
        partial.last_arrival = Some(Instant::now());
        match partial.chunks.get_mut(&header.first_step) {
            Some(held) => {
                // Delivered again (ack wait passed): keep the newest delivery to ack.
                self.stats.repeats_ignored += 1;
                held.message = m;
                held.since = Instant::now();
            }
            None => {
                partial.chunks.insert(
                    header.first_step,
                    HeldChunk { steps, header, message: m, since: Instant::now() },
                );
            }
        }
        if partial.complete() {
            if let Some(p) = self.partials.remove(&key) {
                self.ready.push((key, p));
            }
        }
    }
}

impl RolloutSource for NatsRollouts {
    fn poll(&mut self, out: &mut Vec<Trajectory>, timeout: Duration) -> Result<(), TransportError> {
        if self.link.ensure_connected("pulling chunks").is_err() {
            // Reconnecting: nothing can come; unacked chunks are redelivered later.
            std::thread::sleep(timeout);
            return Ok(());
        }
        let consumer = &self.consumer;
        let expires = timeout.max(Duration::from_millis(20));
        let batch = self.link.call("pulling chunks", expires + POLL_SLACK, async move {
            // What is there now (no wait); if nothing, wait for the first chunk
            // only (a pull returns at its expiry unless it is filled), then
            // take whatever followed it.
            let mut got = pull(consumer, 256, None).await?;
            if got.is_empty() {
                got = pull(consumer, 1, Some(expires)).await?;
                if !got.is_empty() {
                    got.extend(pull(consumer, 255, None).await?);
                }
            }
            Ok::<_, TransportError>(got)
        });
        let batch = match batch {
            Ok(b) => b,
            // The connection reconnects by itself; nothing is lost (unacked
            // chunks come again). The link says when it is down.
            Err(_) => return Ok(()),
        };
        let mut plain = Vec::new();
        for m in batch {
            self.accept(m, &mut plain);
        }
        plain.extend(self.drop_dead_partials());
        let done = std::mem::take(&mut self.ready);
        let refresh_after = self.ack_wait / 2;
        let mut to_refresh = Vec::new();
        for p in self.partials.values_mut() {
            for c in p.chunks.values_mut() {
                if c.since.elapsed() >= refresh_after {
                    c.since = Instant::now();
                    to_refresh.push(c.message.clone());
                }
            }
        }
        let limit = POLL_SLACK + Duration::from_millis(50);
        // Past the deadline nothing is lost: a chunk not acknowledged comes
        // again (and is acknowledged then, as a repeat of what is held).
        let _ = self.link.call("acknowledging chunks", limit, async move {
            for m in &plain {
                let _ = m.ack().await;
            }
            for m in &to_refresh {
                let _ = m.ack_with(jetstream::AckKind::Progress).await;
            }
            Ok(())
        });
        for (key, p) in done {
            // Taken: a delivery of it again is a repeat, acknowledged and
            // ignored; its own chunks are acknowledged at the next commit.
            self.taken.insert(key);
            let mut steps = Steps::default();
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            let group = p.chunks.values().next().map_or(0, |c| c.header.group);
            let mut messages = Vec::with_capacity(p.chunks.len());
            for c in p.chunks.into_values() {
                steps.extend(&c.steps);
                lo = lo.min(c.header.policy_version);
                hi = hi.max(c.header.policy_version);
                messages.push(c.message);
            }
            self.unacked.push((key, messages));
            out.push(Trajectory {
                collector: key.0,
                trajectory: key.1,
                group,
                policy_versions: (lo, hi),
                steps,
            });
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<(), TransportError> {
        if self.unacked.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.unacked);
        let p = &pending;
        let limit = POLL_SLACK + Duration::from_millis(50 * pending.len() as u64);
        let oks = self
            .link
            .call("acknowledging trajectories", limit, async move {
                let mut oks = Vec::with_capacity(p.len());
                for (_, messages) in p {
                    // Acknowledged once the server confirms every chunk's ack.
                    let acks =
                        futures::future::join_all(messages.iter().map(|m| m.double_ack())).await;
                    oks.push(acks.iter().all(Result::is_ok));
                }
                Ok(oks)
            })
            .unwrap_or_else(|_| vec![false; pending.len()]);
        // Not confirmed: tried again at the next commit.
        self.unacked = pending.into_iter().zip(oks).filter(|(_, ok)| !ok).map(|(t, _)| t).collect();
        Ok(())
    }

    fn finish(&mut self) {
        self.stats.incomplete_dropped += self.partials.len() as u64;
        self.partials.clear();
    }

    fn take_abandoned(&mut self) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.abandoned)
    }

    fn stats(&self) -> SourceStats {
        self.stats
    }
}

/// Pulls up to `max` chunks: what is available now (`wait` None), or
/// waiting up to `wait` until `max` came.
async fn pull(
    consumer: &consumer::Consumer<consumer::pull::Config>,
    max: usize,
    wait: Option<Duration>,
) -> Result<Vec<jetstream::Message>, TransportError> {
    let mut got = Vec::new();
    let msgs = match wait {
        None => consumer.fetch().max_messages(max).messages().await,
        Some(w) => consumer.batch().max_messages(max).expires(w).messages().await,
    };
    let mut msgs = msgs.map_err(|e| nats_err("pulling chunks", e))?;
    while let Some(m) = msgs.next().await {
        match m {
            Ok(m) => got.push(m),
            Err(e) if got.is_empty() => return Err(nats_err("pulling chunks", e)),
            Err(_) => break,
        }
    }
    Ok(got)
}
