//! rulka's weight files: `.safetensors` with rulka metadata and a payload
//! checksum, written atomically, and validated tensor by tensor against the
//! network [`Architecture`] before anything is applied.
//!
//! This crate does not link libtorch: collectors use it to turn a weight
//! snapshot into an ONNX model, the learner to load and save its network.
//!
//! ```
//! use rulka_checkpoint::{Meta, Weights};
//! use rulka_config::Config;
//! use rulka_network::Architecture;
//!
//! let cfg = Config::from_yaml_str("nn: {no_image: true, float_hidden_dim: 8, dense_hidden_dim: 8}", "c")?;
//! let arch = Architecture::from_config(&cfg);
//! let weights = Weights::zeros(&arch);                  // every tensor, right shapes
//! let bytes = weights.to_safetensors(&Meta::new(&cfg, 42))?;
//! let back = Weights::from_safetensors(&bytes, "snapshot")?;
//! back.check(&arch, &cfg.network_hash(), false)?;       // names, shapes, architecture
//! assert_eq!(back.meta.as_ref().map(|m| m.step), Some(42));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use rulka_config::Config;
use rulka_network::Architecture;
use safetensors::{Dtype, SafeTensors};
use sha2::{Digest, Sha256};

/// Value of the `format` metadata key in rulka checkpoints.
pub const FORMAT: &str = "rulka.actor_critic";
/// Version of the checkpoint format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// rulka's metadata in a checkpoint's `__metadata__`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// Checkpoint format version.
    pub format_version: u32,
    /// One-line architecture summary (for people).
    pub architecture: String,
    /// [`Config::network_hash`] of the config that shaped the network.
    pub network_hash: String,
    /// Training step (environment frames) when written.
    pub step: u64,
    /// Further string entries (kept as they are).
    pub extra: BTreeMap<String, String>,
}

impl Meta {
    /// Metadata for a network built from `cfg`, at training step `step`.
    pub fn new(cfg: &Config, step: u64) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            architecture: Architecture::from_config(cfg).summary(),
            network_hash: cfg.network_hash(),
            step,
            extra: BTreeMap::new(),
        }
    }
}

/// One tensor's shape and `f32` values (row-major).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Shape.
    pub shape: Vec<usize>,
    /// Values, `shape.iter().product()` of them.
    pub data: Vec<f32>,
}

/// A set of named tensors and, for rulka files, their metadata.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Weights {
    /// Tensors by state-dict name.
    pub tensors: BTreeMap<String, Tensor>,
    /// rulka metadata; `None` for a plain safetensors file (e.g. a converted
    /// PyTorch state dict), whose architecture and checksum cannot be checked.
    pub meta: Option<Meta>,
}

/// What is wrong with a weight file's tensors, all of it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mismatch {
    /// Tensors the network needs that the file lacks.
    pub missing: Vec<String>,
    /// Tensors in the file the network does not have.
    pub unexpected: Vec<String>,
    /// `(name, network shape, file shape)`.
    pub wrong_shape: Vec<(String, Vec<usize>, Vec<usize>)>,
}

impl Mismatch {
    /// No problem at all.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.wrong_shape.is_empty()
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("missing {}", self.missing.join(", ")));
        }
        if !self.unexpected.is_empty() {
            parts.push(format!("unexpected {}", self.unexpected.join(", ")));
        }
        for (name, want, got) in &self.wrong_shape {
            parts.push(format!("{name} has shape {got:?} but the network needs {want:?}"));
        }
        f.write_str(&parts.join("; "))
    }
}

/// Why weights could not be read, written or applied.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// File system error.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not a valid safetensors buffer (truncated, bad header, overlapping offsets, …).
    #[error("{origin}: not a valid safetensors file: {reason}")]
    Corrupt {
        /// File path or snapshot label.
        origin: String,
        /// What the parser found.
        reason: String,
    },
    /// A tensor is not `float32`.
    #[error("{origin}: tensor {name} is {dtype}, only F32 is supported (convert with `.float()`)")]
    Dtype {
        /// File path or snapshot label.
        origin: String,
        /// Tensor name.
        name: String,
        /// Its dtype.
        dtype: String,
    },
    /// The tensor bytes do not hash to the recorded checksum (bit rot, tampering).
    #[error("{origin}: payload checksum mismatch (recorded {recorded}, computed {computed}); the file is corrupt")]
    Checksum {
        /// File path or snapshot label.
        origin: String,
        /// From the metadata.
        recorded: String,
        /// Of the bytes read.
        computed: String,
    },
    /// Written by an unknown checkpoint format version.
    #[error("{origin}: checkpoint format version {found} is not supported (this build reads {FORMAT_VERSION})")]
    Version {
        /// File path or snapshot label.
        origin: String,
        /// Version in the file.
        found: String,
    },
    /// Written for a differently shaped network.
    #[error("{origin}: checkpoint is for another architecture (network hash {found}, config has {expected}): {architecture}")]
    Architecture {
        /// File path or snapshot label.
        origin: String,
        /// Hash in the file.
        found: String,
        /// Hash of the config.
        expected: String,
        /// The file's architecture summary.
        architecture: String,
    },
    /// Names or shapes do not match the network.
    #[error("{origin}: checkpoint does not match the network: {mismatch}")]
    Tensors {
        /// File path or snapshot label.
        origin: String,
        /// Every problem.
        mismatch: Mismatch,
    },
}

impl CheckpointError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        use rulka_error::ErrorKind as K;
        match self {
            Self::Version { .. }
            | Self::Architecture { .. }
            | Self::Tensors { .. }
            | Self::Dtype { .. } => K::BadInput,
            Self::Corrupt { .. } | Self::Checksum { .. } => K::Corrupt,
            Self::Io { .. } => K::Failed,
        }
    }
}

impl Weights {
    /// Every tensor of `arch`, zero-filled (for tests and as a template).
    pub fn zeros(arch: &Architecture) -> Self {
        let tensors = arch
            .tensors()
            .into_iter()
            .map(|t| {
                let n = t.shape.iter().product();
                (t.name, Tensor { shape: t.shape, data: vec![0.0; n] })
            })
            .collect();
        Self { tensors, meta: None }
    }

    /// Overwrites every value with a small one (within ±0.05) drawn from a
    /// SplitMix64 stream seeded by `seed`, tensor by tensor in name order:
    /// weights that compute something without libtorch (`rulka gpu
    /// check`'s decision, tests). Two seeds give two different networks.
    pub fn fill_deterministic(&mut self, seed: u64) {
        let mut z = seed;
        for t in self.tensors.values_mut() {
            for x in &mut t.data {
                z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut v = z;
                v = (v ^ (v >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                v = (v ^ (v >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                v ^= v >> 31;
                *x = ((v >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
            }
        }
    }

    /// Parses a safetensors buffer; `origin` names it in errors. Verifies the
    /// format version and payload checksum of rulka files.
    pub fn from_safetensors(bytes: &[u8], origin: &str) -> Result<Self, CheckpointError> {
        let corrupt =
            |reason: String| CheckpointError::Corrupt { origin: origin.to_string(), reason };
        let (_, header) =
            SafeTensors::read_metadata(bytes).map_err(|e| corrupt(format!("{e:?}")))?;
        let st = SafeTensors::deserialize(bytes).map_err(|e| corrupt(format!("{e:?}")))?;
        let mut tensors = BTreeMap::new();
        for (name, view) in st.tensors() {
            if view.dtype() != Dtype::F32 {
                return Err(CheckpointError::Dtype {
                    origin: origin.to_string(),
                    name,
                    dtype: format!("{:?}", view.dtype()),
                });
            }
            let data = view
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            tensors.insert(name, Tensor { shape: view.shape().to_vec(), data });
        }
        let mut weights = Self { tensors, meta: None };
        if let Some(md) = header.metadata() {
            if md.get("format").map(String::as_str) == Some(FORMAT) {
                weights.meta = Some(parse_meta(md, origin)?);
                let recorded = md.get("payload_sha256").cloned().unwrap_or_default();
                let computed = weights.payload_sha256();
                if recorded != computed {
                    return Err(CheckpointError::Checksum {
                        origin: origin.to_string(),
                        recorded,
                        computed,
                    });
                }
            }
        }
        Ok(weights)
    }

    /// Reads and parses a file (see [`Weights::from_safetensors`]).
    pub fn read(path: &Path) -> Result<Self, CheckpointError> {
        let bytes = fs::read(path)
            .map_err(|source| CheckpointError::Io { path: path.to_path_buf(), source })?;
        Self::from_safetensors(&bytes, &path.display().to_string())
    }

    /// Serialises to safetensors bytes with `meta` and the payload checksum.
    /// The output is byte-for-byte reproducible: header keys and tensors are
    /// in name order (the `safetensors` crate orders metadata by hash map).
    pub fn to_safetensors(&self, meta: &Meta) -> Result<Vec<u8>, CheckpointError> {
        let mut md: BTreeMap<String, String> = meta.extra.clone();
        md.insert("format".into(), FORMAT.into());
        md.insert("format_version".into(), meta.format_version.to_string());
        md.insert("architecture".into(), meta.architecture.clone());
        md.insert("network_hash".into(), meta.network_hash.clone());
        md.insert("step".into(), meta.step.to_string());
        md.insert("payload_sha256".into(), self.payload_sha256());
        self.serialize(md)
    }

    /// Writes a plain PyTorch-style safetensors file (metadata `format: pt`,
    /// as Hugging Face's `save_pretrained` writes, so `transformers` loads it),
    /// atomically.
    pub fn write_pt(&self, path: &Path) -> Result<(), CheckpointError> {
        let md = BTreeMap::from([("format".to_string(), "pt".to_string())]);
        write_atomic(path, &self.serialize(md)?)
    }

    fn serialize(&self, md: BTreeMap<String, String>) -> Result<Vec<u8>, CheckpointError> {
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::json!(md));
        let mut offset = 0usize;
        for (name, t) in &self.tensors {
            let n: usize = t.shape.iter().product();
            if n != t.data.len() {
                return Err(CheckpointError::Corrupt {
                    origin: name.clone(),
                    reason: format!(
                        "shape {:?} needs {n} values, tensor has {}",
                        t.shape,
                        t.data.len()
                    ),
                });
            }
            let end = offset + 4 * n;
            header.insert(name.clone(), serde_json::json!({"dtype": "F32", "shape": t.shape, "data_offsets": [offset, end]}));
            offset = end;
        }
        let mut json = serde_json::to_vec(&serde_json::Value::Object(header)).map_err(|e| {
            CheckpointError::Corrupt { origin: "<serialize>".into(), reason: e.to_string() }
        })?;
        // Pad the header with spaces so tensor data starts 8-byte aligned (as safetensors does).
        json.resize(json.len().div_ceil(8) * 8, b' ');
        let mut out = Vec::with_capacity(8 + json.len() + offset);
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        for t in self.tensors.values() {
            for x in &t.data {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        Ok(out)
    }

    /// Writes atomically: temp file in the same directory → fsync → rename →
    /// fsync the directory. Readers see the old file or the new one, never a
    /// partial one; a crash leaves at most a stray `.*.tmp.*` file.
    pub fn write(&self, path: &Path, meta: &Meta) -> Result<(), CheckpointError> {
        write_atomic(path, &self.to_safetensors(meta)?)
    }

    /// Checks names and shapes against `arch` and, for rulka files, the
    /// network hash. Unless `allow_partial`, missing and unexpected tensors
    /// are errors; wrong shapes always are.
    pub fn check(
        &self,
        arch: &Architecture,
        network_hash: &str,
        allow_partial: bool,
    ) -> Result<(), CheckpointError> {
        self.check_named(arch, network_hash, allow_partial, "weights")
    }

    /// [`Weights::check`] with `origin` naming the source in errors.
    pub fn check_named(
        &self,
        arch: &Architecture,
        network_hash: &str,
        allow_partial: bool,
        origin: &str,
    ) -> Result<(), CheckpointError> {
        if let Some(meta) = &self.meta {
            if meta.network_hash != network_hash {
                return Err(CheckpointError::Architecture {
                    origin: origin.to_string(),
                    found: meta.network_hash.clone(),
                    expected: network_hash.to_string(),
                    architecture: meta.architecture.clone(),
                });
            }
        }
        let mut mismatch = self.mismatch(arch);
        if allow_partial {
            mismatch.missing.clear();
            mismatch.unexpected.clear();
        }
        if mismatch.is_empty() {
            Ok(())
        } else {
            Err(CheckpointError::Tensors { origin: origin.to_string(), mismatch })
        }
    }

    /// Every difference between these tensors and what `arch` needs.
    pub fn mismatch(&self, arch: &Architecture) -> Mismatch {
        let specs = arch.tensors();
        let mut m = Mismatch::default();
        for spec in &specs {
            match self.tensors.get(&spec.name) {
                None => m.missing.push(spec.name.clone()),
                Some(t) if t.shape != spec.shape => {
                    m.wrong_shape.push((spec.name.clone(), spec.shape.clone(), t.shape.clone()))
                }
                Some(_) => {}
            }
        }
        for name in self.tensors.keys() {
            if !specs.iter().any(|s| &s.name == name) {
                m.unexpected.push(name.clone());
            }
        }
        m
    }

    /// SHA-256 over every tensor's name, shape and little-endian bytes, in name order.
    pub fn payload_sha256(&self) -> String {
        let mut h = Sha256::new();
        for (name, t) in &self.tensors {
            h.update((name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
            h.update((t.shape.len() as u64).to_le_bytes());
            for d in &t.shape {
                h.update((*d as u64).to_le_bytes());
            }
            for x in &t.data {
                h.update(x.to_le_bytes());
            }
        }
        hex::encode(h.finalize())
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name)
    }

    /// Whether every value of every tensor is finite.
    pub fn all_finite(&self) -> bool {
        self.tensors.values().all(|t| t.data.iter().all(|x| x.is_finite()))
    }
}

fn parse_meta(md: &HashMap<String, String>, origin: &str) -> Result<Meta, CheckpointError> {
    let version = md.get("format_version").cloned().unwrap_or_default();
    if version.parse::<u32>().ok() != Some(FORMAT_VERSION) {
        return Err(CheckpointError::Version { origin: origin.to_string(), found: version });
    }
    let known =
        ["format", "format_version", "architecture", "network_hash", "step", "payload_sha256"];
    Ok(Meta {
        format_version: FORMAT_VERSION,
        architecture: md.get("architecture").cloned().unwrap_or_default(),
        network_hash: md.get("network_hash").cloned().unwrap_or_default(),
        step: md.get("step").and_then(|s| s.parse().ok()).unwrap_or(0),
        extra: md
            .iter()
            .filter(|(k, _)| !known.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}

/// Writes `bytes` to `path` atomically (temp file → fsync → rename → fsync dir).
/// On any error the temp file is removed and `path` is untouched.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    write_atomic_by(path, bytes, &mut SystemSteps)
}

/// The durable steps of [`write_atomic`], taken through this seam so that a
/// test can see their order (which only a power cut would otherwise show):
/// the temp file synced before it is renamed over `path`, the directory
/// synced after.
trait AtomicSteps {
    fn sync_file(&mut self, f: &File) -> std::io::Result<()>;
    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()>;
    fn sync_dir(&mut self, dir: &Path) -> std::io::Result<()>;
}

/// The steps as the system takes them.
struct SystemSteps;

impl AtomicSteps for SystemSteps {
    fn sync_file(&mut self, f: &File) -> std::io::Result<()> {
        f.sync_all()
    }
    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
        fs::rename(from, to)
    }
    fn sync_dir(&mut self, dir: &Path) -> std::io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

fn write_atomic_by(
    path: &Path,
    bytes: &[u8],
    steps: &mut dyn AtomicSteps,
) -> Result<(), CheckpointError> {
    let io = |source| CheckpointError::Io { path: path.to_path_buf(), source };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(".{file_name}.tmp.{}.{nanos}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        steps.sync_file(&f)?;
        drop(f);
        steps.rename(&tmp, path)?;
        steps.sync_dir(&dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io)
}

/// Removes stray temp files that [`write_atomic`] leaves behind after a crash
/// (`.NAME.tmp.PID.N` in `dir`); returns how many were removed.
pub fn remove_stale_temps(dir: &Path) -> std::io::Result<usize> {
    let mut n = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && name.contains(".tmp.") && entry.file_type()?.is_file() {
            fs::remove_file(entry.path())?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod atomic_tests {
    use super::*;

    /// The system's steps, each recorded with what `path` holds then.
    struct Recording<'a> {
        path: &'a Path,
        log: Vec<String>,
    }

    impl Recording<'_> {
        fn seen(&self) -> String {
            fs::read_to_string(self.path).unwrap_or_else(|_| "nothing".into())
        }
    }

    impl AtomicSteps for Recording<'_> {
        fn sync_file(&mut self, f: &File) -> std::io::Result<()> {
            self.log.push(format!(
                "sync the temp file ({} bytes); path holds {}",
                f.metadata()?.len(),
                self.seen()
            ));
            SystemSteps.sync_file(f)
        }
        fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
            let r = SystemSteps.rename(from, to);
            self.log.push(format!("rename over the path; path holds {}", self.seen()));
            r
        }
        fn sync_dir(&mut self, dir: &Path) -> std::io::Result<()> {
            self.log.push(format!("sync the directory; path holds {}", self.seen()));
            SystemSteps.sync_dir(dir)
        }
    }

    /// The temp file is whole and synced before it is renamed over the
    /// path (until then the path holds the old bytes), and the directory is
    /// synced after the rename: a power cut at any point leaves the old file
    /// or the new one, never a renamed file whose data never reached the disk.
    #[test]
    fn the_temp_file_is_synced_before_the_rename_and_the_directory_after() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        fs::write(&path, "old").expect("the old file");
        let mut rec = Recording { path: &path, log: Vec::new() };
        write_atomic_by(&path, b"new!", &mut rec).expect("written");
        assert_eq!(
            rec.log,
            [
                "sync the temp file (4 bytes); path holds old",
                "rename over the path; path holds new!",
                "sync the directory; path holds new!",
            ]
        );
        assert_eq!(remove_stale_temps(dir.path()).expect("listed"), 0, "no temp file left");
    }
}
