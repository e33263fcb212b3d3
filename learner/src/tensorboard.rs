//! A small TensorBoard event-file writer: scalars only, which is what the
//! learner logs. Files are TFRecord-framed `tensorflow.Event` protobufs
//! (`tensorflow/core/util/event.proto`), so `tensorboard --logdir` reads them.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use prost::Message;

/// `tensorflow.Event` (the fields rulka writes).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TbEvent {
    /// Seconds since the epoch.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// Global step (rulka: environment frames).
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// `brain.Event:2` in a file's first event.
    #[prost(string, optional, tag = "3")]
    pub file_version: Option<String>,
    /// Scalars.
    #[prost(message, optional, tag = "5")]
    pub summary: Option<TbSummary>,
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TbSummary {
    /// Values.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<TbSummaryValue>,
}

/// `tensorflow.Summary.Value` with a `simple_value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TbSummaryValue {
    /// Tag, e.g. `Training/grpo_loss`.
    #[prost(string, tag = "1")]
    pub tag: String,
    /// The scalar.
    #[prost(float, optional, tag = "2")]
    pub simple_value: Option<f32>,
}

/// CRC-32C (Castagnoli), as TFRecord uses.
pub fn crc32c(data: &[u8]) -> u32 {
    const POLY: u32 = 0x82F6_3B78;
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ POLY } else { crc >> 1 };
        }
    }
    !crc
}

/// TFRecord's masked CRC: `((crc >> 15) | (crc << 17)) + 0xa282ead8`.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let c = crc32c(data);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Appends scalars to one event file in `dir`.
#[derive(Debug)]
pub struct EventWriter {
    out: BufWriter<File>,
    path: PathBuf,
}

impl EventWriter {
    /// Creates `dir` if needed and a new event file in it.
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "rulka".into());
        let path = dir.join(format!(
            "events.out.tfevents.{}.{host}.{}.{}",
            now.as_secs(),
            std::process::id(),
            now.subsec_nanos()
        ));
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        let mut w = Self { out: BufWriter::new(file), path };
        w.write_event(&TbEvent {
            wall_time: now.as_secs_f64(),
            step: 0,
            file_version: Some("brain.Event:2".into()),
            summary: None,
        })?;
        Ok(w)
    }

    /// The event file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Logs `value` under `tag` at `step`. Non-finite values are written as they are
    /// (TensorBoard shows them), so a NaN loss is visible rather than hidden.
    pub fn scalar(&mut self, tag: &str, step: i64, value: f64) -> anyhow::Result<()> {
        let wall_time =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let summary = TbSummary {
            value: vec![TbSummaryValue { tag: tag.into(), simple_value: Some(value as f32) }],
        };
        self.write_event(&TbEvent { wall_time, step, file_version: None, summary: Some(summary) })
    }

    fn write_event(&mut self, e: &TbEvent) -> anyhow::Result<()> {
        let data = e.encode_to_vec();
        let len = (data.len() as u64).to_le_bytes();
        self.out.write_all(&len)?;
        self.out.write_all(&masked_crc32c(&len).to_le_bytes())?;
        self.out.write_all(&data)?;
        self.out.write_all(&masked_crc32c(&data).to_le_bytes())?;
        Ok(())
    }

    /// Flushes buffered events to the file and the disk.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_data()?;
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

/// Reads every event of a file, verifying both CRCs of each record.
pub fn read_events(path: &Path) -> anyhow::Result<Vec<TbEvent>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    let mut off = 0;
    while off < bytes.len() {
        anyhow::ensure!(
            off + 12 <= bytes.len(),
            "{}: truncated record header at byte {off}",
            path.display()
        );
        let len_bytes = &bytes[off..off + 8];
        let len = u64::from_le_bytes(len_bytes.try_into()?) as usize;
        let crc = u32::from_le_bytes(bytes[off + 8..off + 12].try_into()?);
        anyhow::ensure!(
            crc == masked_crc32c(len_bytes),
            "{}: bad length CRC at byte {off}",
            path.display()
        );
        let start = off + 12;
        anyhow::ensure!(
            start + len + 4 <= bytes.len(),
            "{}: truncated record at byte {off}",
            path.display()
        );
        let data = &bytes[start..start + len];
        let crc = u32::from_le_bytes(bytes[start + len..start + len + 4].try_into()?);
        anyhow::ensure!(
            crc == masked_crc32c(data),
            "{}: bad data CRC at byte {off}",
            path.display()
        );
        out.push(TbEvent::decode(data)?);
        off = start + len + 4;
    }
    Ok(out)
}
