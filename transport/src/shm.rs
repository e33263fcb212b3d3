//! The shared-memory transport (one machine): a ring per collector for
//! chunks, the weight board for snapshots ([`rulka_shm`] has the design).

use std::time::{Duration, Instant};

use rulka_shm::{
    write_chunk, BoardReader, BoardWriter, ChunkHeader, ChunkLayout, Liveness, Reassembler,
    RingConsumer, RingProducer, ShmError, Steps, Trajectory,
};

use crate::{
    ChunkSink, RolloutSource, Sent, SinkStats, SourceStats, TransportError, WeightSink,
    WeightSource,
};

/// A collector's ring, as a [`ChunkSink`].
#[derive(Debug)]
pub struct ShmChunkSink {
    producer: RingProducer,
    layout: ChunkLayout,
    stats: SinkStats,
}

impl ShmChunkSink {
    /// Wraps the producer end of a collector's ring.
    pub fn new(producer: RingProducer, layout: ChunkLayout) -> Self {
        Self { producer, layout, stats: SinkStats::default() }
    }
}

impl ChunkSink for ShmChunkSink {
    fn send(
        &mut self,
        header: &ChunkHeader,
        steps: &Steps,
        keep_waiting: &mut dyn FnMut() -> bool,
    ) -> Result<Sent, TransportError> {
        let dropped_before = self.producer.stats().dropped;
        loop {
            match write_chunk(&mut self.producer, &self.layout, header, steps) {
                Ok(()) => {
                    self.stats.chunks += 1;
                    let dropped = self.producer.stats().dropped - dropped_before;
                    self.stats.dropped += dropped;
                    return Ok(if dropped > 0 { Sent::Dropped } else { Sent::Stored });
                }
                Err(ShmError::RingFull { .. }) => {
                    self.stats.full_waits += 1;
                    if matches!(self.producer.consumer()?, Liveness::Dead | Liveness::Absent) {
                        return Err(TransportError::PeerGone);
                    }
                    if !keep_waiting() {
                        return Ok(Sent::Abandoned);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn stats(&self) -> SinkStats {
        self.stats
    }
}

/// The weight board's reading end, as a [`WeightSource`].
#[derive(Debug)]
pub struct ShmWeightSource {
    reader: BoardReader,
}

impl ShmWeightSource {
    /// Wraps a board reader.
    pub fn new(reader: BoardReader) -> Self {
        Self { reader }
    }
}

impl WeightSource for ShmWeightSource {
    fn wait_newer(
        &mut self,
        current: Option<u64>,
        out: &mut Vec<u8>,
        timeout: Duration,
    ) -> Result<Option<u64>, TransportError> {
        Ok(self.reader.wait_newer(current, out, timeout).map(|i| i.version))
    }
}

/// The weight board's writing end, as a [`WeightSink`].
#[derive(Debug)]
pub struct ShmWeightSink {
    writer: BoardWriter,
}

impl ShmWeightSink {
    /// Wraps the board writer.
    pub fn new(writer: BoardWriter) -> Self {
        Self { writer }
    }

    /// Removes the board's files (clean shutdown).
    pub fn remove(self) -> Result<(), ShmError> {
        self.writer.remove()
    }
}

impl WeightSink for ShmWeightSink {
    fn publish(&mut self, version: u64, bytes: &[u8]) -> Result<(), TransportError> {
        Ok(self.writer.publish(version, bytes)?)
    }
}

/// The collectors' rings and a reassembler, as a [`RolloutSource`]. A dead
/// collector's partial trajectory is discarded when its restarted
/// incarnation's first chunk arrives (the ring may still hold committed
/// chunks of trajectories it completed before dying).
#[derive(Debug)]
pub struct ShmRollouts {
    rings: Vec<RingConsumer>,
    reassembler: Reassembler,
    buf: Vec<u8>,
}

impl ShmRollouts {
    /// Reads `rings` (ring i is collector i's), chunks of `layout`.
    pub fn new(rings: Vec<RingConsumer>, layout: ChunkLayout) -> Self {
        Self { rings, reassembler: Reassembler::new(layout), buf: Vec::new() }
    }

    /// Discards every partial trajectory (after the collectors stopped).
    pub fn drop_partials(&mut self) {
        for i in 0..self.rings.len() {
            self.reassembler.drop_collector(i as u32);
        }
    }

    /// Removes the rings' files (clean shutdown).
    pub fn remove(self) {
        for r in self.rings {
            let _ = r.remove();
        }
    }

    fn drain_once(&mut self, out: &mut Vec<Trajectory>) -> Result<usize, TransportError> {
        let mut got = 0;
        for ring in &mut self.rings {
            for _ in 0..64 {
                if !ring.pop(&mut self.buf) {
                    break;
                }
                got += 1;
                if let Some(t) = self.reassembler.push(&self.buf)? {
                    out.push(t);
                }
            }
        }
        Ok(got)
    }
}

impl RolloutSource for ShmRollouts {
    fn poll(&mut self, out: &mut Vec<Trajectory>, timeout: Duration) -> Result<(), TransportError> {
        let start = Instant::now();
        let before = out.len();
        loop {
            let got = self.drain_once(out)?;
            if out.len() > before || (got == 0 && start.elapsed() >= timeout) {
                return Ok(());
            }
            if got == 0 {
                std::thread::sleep(Duration::from_millis(1).min(timeout));
            }
        }
    }

    fn finish(&mut self) {
        self.drop_partials();
    }

    fn take_abandoned(&mut self) -> Vec<(u32, u64)> {
        self.reassembler.take_abandoned()
    }

    fn stats(&self) -> SourceStats {
        let r = self.reassembler.stats();
        SourceStats {
            incomplete_dropped: r.dropped_incomplete,
            orphan_chunks: r.orphan_chunks,
            dropped: self.rings.iter().map(|r| r.stats().dropped).sum(),
            repeats_ignored: 0,
            rejected: 0,
        }
    }
}
