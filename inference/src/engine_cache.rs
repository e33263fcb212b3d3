//! The TensorRT engine cache: one folder per network architecture, input
//! shape and precision, never per weights, so that every snapshot of a run
//! (and every run and collector of the same network) reuses one engine.
//!
//! The key is a digest of the exported model with its weights and metadata
//! taken out (the graph, its shapes, the initializers' names, types and
//! dimensions), the batch size, fp16, and the platform: the ONNX Runtime
//! and TensorRT libraries and the GPU it was built for. A key's folder holds:
//!
//! - `ctx.onnx`: ONNX Runtime's EP-context model with the weight-stripped
//!   engine embedded (written once, by whichever process builds it first,
//!   under `.lock`, and renamed into place);
//! - `key.json`: what the key covers, for people;
//! - `snapshots/<pid>-<version>/policy.onnx`: a snapshot being refitted
//!   from, removed once its session is built.
//!
//! The cache's root also holds TensorRT's timing cache (`timing/`), shared
//! by every key on the same GPU.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// File name of the model a snapshot is refitted from (ONNX Runtime's
/// EP-context node records the file name the engine was built from, and
/// refits from that name in the folder it is given).
pub const SOURCE_MODEL: &str = "policy.onnx";
/// File name of the EP-context model in a key's folder.
pub const CONTEXT_MODEL: &str = "ctx.onnx";

/// Where the cache lives when `inference.tensorrt_engine_cache_dir` is not
/// set: `$XDG_CACHE_HOME/rulka/tensorrt`, else `~/.cache/rulka/tensorrt`,
/// else `rulka-tensorrt` in the temp folder.
pub fn default_root() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("rulka/tensorrt");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".cache/rulka/tensorrt");
    }
    std::env::temp_dir().join("rulka-tensorrt")
}

/// What an engine is built for besides the model's structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineTarget {
    /// Rows per call the engine's optimisation profile is fixed to.
    pub batch: usize,
    /// TensorRT's fp16 kernels.
    pub fp16: bool,
    /// The ONNX Runtime and TensorRT libraries (their resolved file names,
    /// which carry their versions) and the GPU, as far as known.
    pub platform: String,
}

impl EngineTarget {
    /// The platform part of a key: `ort` and `trt` (the resolved file names
    /// of the ONNX Runtime and TensorRT libraries in use) and the GPU the
    /// engine runs on: line `device_id` of `gpus` (`nvidia-smi -L`'s, which
    /// numbers GPUs as CUDA does), or `GPU <device_id>` when it lists fewer.
    pub fn platform_of(ort: &str, trt: &str, gpus: &[String], device_id: u32) -> String {
        let gpu =
            gpus.get(device_id as usize).cloned().unwrap_or_else(|| format!("GPU {device_id}"));
        format!("ort={ort} trt={trt} gpu={gpu}")
    }
}

/// One key's folder of the cache.
#[derive(Debug, Clone)]
pub struct EngineCache {
    root: PathBuf,
    dir: PathBuf,
    key: String,
}

/// The exported model with its weights and metadata taken out: what the
/// engine's structure depends on. Two snapshots of one network give the
/// same bytes; a change of architecture or of an input's shape does not.
pub fn structure_of(model: &[u8]) -> Result<Vec<u8>, String> {
    rulka_export::without_weights(model).map_err(|e| format!("not an ONNX model: {e}"))
}

/// The key of `model`'s engine for `target`: 16 hex digits.
pub fn key_of(model: &[u8], target: &EngineTarget) -> Result<String, String> {
    let mut h = Sha256::new();
    h.update(structure_of(model)?);
    h.update(
        format!("\nbatch={}\nfp16={}\nplatform={}\n", target.batch, target.fp16, target.platform)
            .as_bytes(),
    );
    Ok(hex::encode(&h.finalize()[..8]))
}

impl EngineCache {
    /// The folder of `model`'s engine for `target` under `root` (created).
    pub fn open(root: &Path, model: &[u8], target: &EngineTarget) -> Result<Self, String> {
        let key = key_of(model, target)?;
        let dir = root.join(&key);
        std::fs::create_dir_all(dir.join("snapshots"))
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let about = dir.join("key.json");
        if !about.is_file() {
            let doc = serde_json::json!({
                "batch": target.batch,
                "fp16": target.fp16,
                "platform": target.platform,
                "network": rulka_export::metadata(model)
                    .ok()
                    .and_then(|m| m.into_iter().find(|(k, _)| k == "rulka.network_hash").map(|(_, v)| v)),
            });
            write_atomically(&about, doc.to_string().as_bytes())?;
        }
        let cache = Self { root: root.to_path_buf(), dir, key };
        cache.remove_dead_snapshots();
        Ok(cache)
    }

    /// The key (the folder's name).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// TensorRT's timing cache folder, shared by every key.
    pub fn timing_dir(&self) -> PathBuf {
        self.root.join("timing")
    }

    /// The EP-context model, when one has been built.
    pub fn context_model(&self) -> Option<Vec<u8>> {
        std::fs::read(self.dir.join(CONTEXT_MODEL)).ok().filter(|b| !b.is_empty())
    }

    /// Installs `built` (a freshly dumped EP-context model) as this key's
    /// (written beside and renamed, so a reader sees the old or the new).
    pub fn install_context_model(&self, built: &Path) -> Result<(), String> {
        let bytes =
            std::fs::read(built).map_err(|e| format!("reading {}: {e}", built.display()))?;
        write_atomically(&self.dir.join(CONTEXT_MODEL), &bytes)
    }

    /// Drops a context model that failed to load (a different GPU or
    /// TensorRT, or a file cut short), so the next build makes a new one.
    pub fn discard_context_model(&self) {
        let _ = std::fs::remove_file(self.dir.join(CONTEXT_MODEL));
    }

    /// Holds the key's build lock until dropped: one process builds an
    /// engine while the others wait (polling), then find it built. The
    /// kernel drops a dead holder's lock.
    pub fn lock(&self) -> Result<rulka_shm::ProcessLock, String> {
        let path = self.dir.join(".lock");
        loop {
            match rulka_shm::ProcessLock::acquire(&path) {
                Ok(l) => return Ok(l),
                Err(rulka_shm::ShmError::LockHeld { .. }) => {
                    std::thread::sleep(std::time::Duration::from_millis(100))
                }
                Err(e) => return Err(format!("locking {}: {e}", path.display())),
            }
        }
    }

    /// Writes `model` as `snapshots/<pid>-<version>/policy.onnx`; the folder
    /// is removed when the returned guard drops.
    pub fn stage(&self, model: &[u8], version: u64) -> Result<Staged, String> {
        let dir = self.dir.join("snapshots").join(format!("{}-{version}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        write_atomically(&dir.join(SOURCE_MODEL), model)?;
        Ok(Staged { dir })
    }

    fn remove_dead_snapshots(&self) {
        let Ok(entries) = std::fs::read_dir(self.dir.join("snapshots")) else { return };
        for e in entries.flatten() {
            let name = e.file_name();
            let pid = name.to_str().and_then(|n| n.split('-').next()?.parse::<u32>().ok());
            if pid.is_some_and(|p| !rulka_shm::process_alive(p)) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// A staged snapshot folder (see [`EngineCache::stage`]).
#[derive(Debug)]
pub struct Staged {
    dir: PathBuf,
}

impl Staged {
    /// The folder holding `policy.onnx`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("writing {}: {e}", path.display())
    })
}
