//! Saved trajectories, one per line of a JSON Lines file:
//! `{"group": 3, "frames_b64": "…", "floats": [...], "actions": [...],
//! "rewards": [...], "log_probs": [...], "values": [...]}` — `frames_b64` is
//! the `T·H·W` raw frame bytes in standard base64 (empty for float-only
//! networks), `floats` the `T·F` raw float vectors, `actions` `T·heads`,
//! the rest `T` each. `rulka train --save-trajectories` writes this format
//! (`RUN_DIR/trajectories.jsonl`); DPO's offline mode and `rulka demos
//! record --trajectories` read it.

use std::path::Path;

use anyhow::{bail, Context as _};
use rulka_config::Config;
use rulka_network::Architecture;
use serde::{Deserialize, Serialize};

/// One saved trajectory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SavedTrajectory {
    /// Group ("prompt", the track seed).
    pub group: u64,
    /// `T·H·W` raw frames (empty for float-only networks).
    pub frames: Vec<u8>,
    /// `T·F` raw floats.
    pub floats: Vec<f32>,
    /// `T·heads` actions.
    pub actions: Vec<i32>,
    /// Per-step rewards (shaped and folded, as trained on).
    pub rewards: Vec<f32>,
    /// Behaviour log-probabilities.
    pub log_probs: Vec<f32>,
    /// Collector values.
    pub values: Vec<f32>,
    /// Which trajectory of its run it is, when a trainer saved it
    /// (`rulka train --save-trajectories`).
    pub id: Option<SavedId>,
}

/// A saved trajectory's name within its run: the run's start that received
/// it (`starts.json`), its collector, the collector's incarnation and its
/// number there — unique within the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedId {
    pub start: u32,
    pub collector: u32,
    pub incarnation: u32,
    pub sequence: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<SavedId>,
    group: u64,
    frames_b64: String,
    floats: Vec<f32>,
    actions: Vec<i32>,
    rewards: Vec<f32>,
    log_probs: Vec<f32>,
    values: Vec<f32>,
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn b64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                out.push(B64[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn b64_decode(s: &str) -> Result<Vec<u8>, String> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for (i, ch) in s.bytes().enumerate() {
        let v = B64
            .iter()
            .position(|&b| b == ch)
            .ok_or_else(|| format!("invalid base64 byte {ch:?} at {i}"))?;
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

impl SavedTrajectory {
    /// Steps.
    pub fn len(&self) -> usize {
        self.rewards.len()
    }

    /// No steps.
    pub fn is_empty(&self) -> bool {
        self.rewards.is_empty()
    }

    /// `Σ_t r_t`.
    pub fn ret(&self) -> f64 {
        self.rewards.iter().map(|&r| f64::from(r)).sum()
    }

    /// The JSON line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        let line = Line {
            id: self.id,
            group: self.group,
            frames_b64: b64_encode(&self.frames),
            floats: self.floats.clone(),
            actions: self.actions.clone(),
            rewards: self.rewards.clone(),
            log_probs: self.log_probs.clone(),
            values: self.values.clone(),
        };
        serde_json::to_string(&line).unwrap_or_default()
    }

    /// Parses and validates one line against `cfg`'s network.
    pub fn from_json_line(cfg: &Config, line: &str) -> anyhow::Result<Self> {
        let l: Line = serde_json::from_str(line)?;
        let arch = Architecture::from_config(cfg);
        let t = l.rewards.len();
        let frames = b64_decode(&l.frames_b64).map_err(anyhow::Error::msg).context("frames_b64")?;
        let frame_len = arch.image.as_ref().map_or(0, |i| i.height * i.width);
        for (field, found, per) in [
            ("frames_b64", frames.len(), frame_len),
            ("floats", l.floats.len(), arch.float_dim),
            ("actions", l.actions.len(), arch.n_heads),
            ("log_probs", l.log_probs.len(), 1),
            ("values", l.values.len(), 1),
        ] {
            if found != t * per {
                bail!(
                    "{field}: {found} values for {t} steps; expected {} ({per} per step)",
                    t * per
                );
            }
        }
        if t == 0 {
            bail!("empty trajectory");
        }
        if let Some(a) = l.actions.iter().find(|&&a| a < 0 || a as usize >= arch.n_actions) {
            bail!("actions: {a} is not in 0..{}", arch.n_actions);
        }
        if l.floats.iter().chain(&l.rewards).any(|x| !x.is_finite()) {
            bail!("non-finite floats or rewards");
        }
        Ok(Self {
            group: l.group,
            frames,
            floats: l.floats,
            actions: l.actions,
            rewards: l.rewards,
            log_probs: l.log_probs,
            values: l.values,
            id: l.id,
        })
    }
}

/// Reads a JSONL file of saved trajectories; a bad line is an error naming
/// the file and line. Blank lines are skipped.
pub fn load_jsonl(cfg: &Config, path: &Path) -> anyhow::Result<Vec<SavedTrajectory>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            SavedTrajectory::from_json_line(cfg, line)
                .with_context(|| format!("{}:{}", path.display(), i + 1))?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(b64_encode(plain.as_bytes()), enc);
            assert_eq!(b64_decode(enc).unwrap_or_default(), plain.as_bytes());
        }
    }
}
