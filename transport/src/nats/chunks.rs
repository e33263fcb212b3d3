//! The collector's [`ChunkSink`]: chunks published with message ids and
//! sequence numbers, kept in a bounded outbox while the server is out of reach.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_nats::HeaderMap;
use bytes::Bytes;
use rulka_shm::{encode_chunk, ChunkHeader, ChunkLayout, Steps, TrajectoryId};

use crate::{ChunkSink, Sent, SinkStats, TransportError};

use super::*;

/// A chunk waiting in a collector's outbox.
#[derive(Debug)]
struct Outgoing {
    trajectory: u64,
    id: String,
    payload: Bytes,
    headers: HeaderMap,
}

/// A collector's chunk sink over NATS: chunks go out in order through an
/// outbox, which holds them while the server is out of reach.
#[derive(Debug)]
pub struct NatsChunkSink {
    link: NatsLink,
    subject: String,
    run: String,
    incarnation: u32,
    layout: ChunkLayout,
    schema: String,
    block: Option<Duration>,
    seq: u64,
    stats: SinkStats,
    outbox: VecDeque<Outgoing>,
    outbox_bytes: usize,
    outbox_max: usize,
    retry_at: Option<Instant>,
    backoff: Duration,
    alive: Arc<std::sync::Mutex<CollectorAlive>>,
    alive_now: Arc<tokio::sync::Notify>,
}

impl NatsChunkSink {
    /// The sink of collector incarnation `(subject, run, incarnation)`:
    /// a full stream blocks up to `block` (None: drops), the outbox holds
    /// up to `outbox_bytes`, `alive` counts what it holds (and `alive_now`
    /// has it put on the server at once).
    pub(super) fn new(
        link: NatsLink,
        (subject, run, incarnation): (String, String, u32),
        layout: ChunkLayout,
        block: Option<Duration>,
        outbox_bytes: usize,
        (alive, alive_now): (Arc<std::sync::Mutex<CollectorAlive>>, Arc<tokio::sync::Notify>),
    ) -> Self {
        Self {
            link,
            subject,
            run,
            incarnation,
            layout,
            schema: schema_hash(&layout),
            block,
            seq: 0,
            stats: SinkStats::default(),
            outbox: VecDeque::new(),
            outbox_bytes: 0,
            outbox_max: outbox_bytes.max(1),
            retry_at: None,
            backoff: Duration::from_millis(250),
            alive,
            alive_now,
        }
    }
}

fn stream_full(message: &str) -> bool {
    let m = message.to_lowercase();
    m.contains("maximum bytes") || m.contains("maximum messages") || m.contains("resource limits")
}

/// How an attempt to empty the outbox ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flushed {
    /// Empty.
    All,
    /// The server is out of reach: the rest waits.
    Held,
    /// A full stream made it wait and `keep_waiting` said stop.
    Abandoned,
}

impl NatsChunkSink {
    fn note(&mut self) {
        self.stats.queued = self.outbox.len() as u64;
        self.stats.queued_bytes = self.outbox_bytes as u64;
        if let Ok(mut a) = self.alive.lock() {
            a.chunks = self.stats.chunks;
            a.queued = self.stats.queued;
            a.outbox_dropped = self.stats.outbox_dropped;
        }
    }

    fn pop(&mut self) {
        if let Some(o) = self.outbox.pop_front() {
            self.outbox_bytes -= o.payload.len();
        }
    }

    /// Drops the oldest whole trajectories while the outbox is over its bound.
    fn bound(&mut self) {
        while self.outbox_bytes > self.outbox_max {
            let Some(t) = self.outbox.front().map(|o| o.trajectory) else { break };
            while self.outbox.front().is_some_and(|o| o.trajectory == t) {
                self.pop();
            }
            self.stats.outbox_dropped += 1;
        }
    }

    /// Sends the outbox's chunks in order until it is empty, the server is
    /// out of reach (they wait: [`Flushed::Held`]), or `keep_waiting` stops
    /// a wait on a full stream.
    fn flush_outbox(
        &mut self,
        keep_waiting: &mut dyn FnMut() -> bool,
    ) -> Result<Flushed, TransportError> {
        let mut waited_full = false;
        let mut sent = 0u64;
        loop {
            let Some(front) = self.outbox.front() else { return Ok(Flushed::All) };
            // A long backlog: the heartbeat goes on, and a stop leaves the rest held.
            if sent % 16 == 15 && !keep_waiting() {
                return Ok(Flushed::Held);
            }
            if self.retry_at.is_some_and(|t| Instant::now() < t)
                || self.link.ensure_connected("sending chunks").is_err()
            {
                return Ok(Flushed::Held);
            }
            let js = &self.link.js;
            let publish = jetstream::message::PublishMessage::build()
                .payload(front.payload.clone())
                .headers(front.headers.clone())
                .message_id(front.id.as_str());
            let subject = self.subject.clone();
            let r = self.link.call("sending a chunk", CHUNK_DEADLINE, async move {
                let ack =
                    js.send_publish(subject, publish).await.map_err(|e| nats_err("publish", e))?;
                ack.await.map_err(|e| nats_err("publish", e))
            });
            match r {
                Ok(_) => {
                    self.pop();
                    sent += 1;
                    self.stats.chunks += 1;
                    self.backoff = Duration::from_millis(250);
                    self.retry_at = None;
                    waited_full = false;
                }
                Err(TransportError::Nats { message, .. }) if stream_full(&message) => {
                    if self.block.is_none() {
                        self.pop();
                        self.stats.dropped += 1;
                        continue;
                    }
                    if !waited_full {
                        self.stats.full_waits += 1;
                        waited_full = true;
                    }
                    if !keep_waiting() {
                        return Ok(Flushed::Abandoned);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(TransportError::Nats { message, .. })
                    if message.to_lowercase().contains("permissions violation") =>
                {
                    return Err(TransportError::Auth { url: self.link.url.clone(), message });
                }
                Err(_) => {
                    // Timed out or failed: the server may have stored it; a resend
                    // carries the same message id, which the server stores once.
                    self.stats.retries += 1;
                    self.retry_at = Some(Instant::now() + self.backoff);
                    self.backoff = (self.backoff * 2).min(Duration::from_secs(5));
                    return Ok(Flushed::Held);
                }
            }
        }
    }
}

impl ChunkSink for NatsChunkSink {
    fn send(
        &mut self,
        header: &ChunkHeader,
        steps: &Steps,
        keep_waiting: &mut dyn FnMut() -> bool,
    ) -> Result<Sent, TransportError> {
        let payload: Bytes = encode_chunk(&self.layout, header, steps)?.into();
        let chunk = header.first_step / self.layout.max_steps.max(1) as u64;
        let seq = TrajectoryId::of(header).sequence;
        let id = format!("{}.{}.{}.{seq}.{chunk}", self.run, header.collector, self.incarnation);
        let mut headers = HeaderMap::new();
        headers.insert(H_POLICY_VERSION, header.policy_version.to_string().as_str());
        headers.insert(H_SEQ, self.seq.to_string().as_str());
        headers.insert(H_SCHEMA, self.schema.as_str());
        headers.insert(H_BYTE_ORDER, "le");
        self.seq += 1;
        let (before_chunks, before_dropped) = (self.stats.chunks, self.stats.dropped);
        self.outbox_bytes += payload.len();
        self.outbox.push_back(Outgoing {
            trajectory: header.trajectory,
            id: id.clone(),
            payload,
            headers,
        });
        let mut flushed = self.flush_outbox(keep_waiting)?;
        if self.block.is_some() {
            // Back-pressure: a full outbox makes the collector wait, as a full
            // stream does, until the server takes chunks again (or it is stopped).
            let mut waited = false;
            while self.outbox_bytes > self.outbox_max && flushed != Flushed::Abandoned {
                if !waited {
                    self.stats.full_waits += 1;
                    waited = true;
                }
                if !keep_waiting() {
                    flushed = Flushed::Abandoned;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
                flushed = self.flush_outbox(keep_waiting)?;
            }
        } else {
            self.bound();
        }
        let in_outbox = self.outbox.iter().rev().any(|o| o.id == id);
        let sent = match flushed {
            Flushed::Abandoned if in_outbox => {
                // This chunk was not sent (the ones before it may wait too): its
                // trajectory stays incomplete.
                if let Some(i) = self.outbox.iter().rposition(|o| o.id == id) {
                    if let Some(o) = self.outbox.remove(i) {
                        self.outbox_bytes -= o.payload.len();
                    }
                }
                Sent::Abandoned
            }
            _ if in_outbox => Sent::Queued,
            _ if self.stats.chunks > before_chunks && self.outbox.is_empty() => {
                if self.stats.dropped > before_dropped {
                    Sent::Dropped
                } else {
                    Sent::Stored
                }
            }
            // Dropped: by a full stream under the drop policy, or from a full outbox.
            _ => Sent::Dropped,
        };
        self.note();
        Ok(sent)
    }

    fn stats(&self) -> SinkStats {
        self.stats
    }

    fn report_game(&mut self, game: rulka_config::GameCounters) {
        if let Ok(mut a) = self.alive.lock() {
            if a.game == Some(game) {
                return;
            }
            a.game = Some(game);
        }
        self.alive_now.notify_one();
    }

    fn flush(&mut self, limit: Duration) -> u64 {
        let deadline = Instant::now() + limit;
        while !self.outbox.is_empty() && Instant::now() < deadline {
            self.retry_at = None;
            let mut before = || Instant::now() < deadline;
            if let Ok(Flushed::All) = self.flush_outbox(&mut before) {
                break;
            }
            std::thread::sleep(
                Duration::from_millis(100).min(deadline.saturating_duration_since(Instant::now())),
            );
        }
        self.note();
        self.outbox.len() as u64
    }
}
