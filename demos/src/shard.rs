//! A demonstration drive on disk: one safetensors shard per drive, with
//! `frames` (U8, `n × frame_len`), `floats` (F32, `n × F`), `actions` (I32,
//! `n × heads`) and `ingredients` (F32, `n × ingredients::COUNT`), step for
//! step as a collector records a rollout (the last step is the terminal
//! state; its action is never executed), and string metadata: `format`
//! (`rulka.demos`), `format_version`, `network_hash`, `map`, `track_seed`,
//! `environment`, `source`, `race_time_ms` (empty when not finished),
//! `steps`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rulka_config::{ingredients, prompt_name, Config, EnvKind};
use safetensors::{Dtype, SafeTensors};
use sha2::{Digest, Sha256};

use crate::DemoError;

/// `format` of a demonstration shard.
pub const DEMO_FORMAT: &str = "rulka.demos";
/// The shard format version this build writes and reads.
pub const DEMO_FORMAT_VERSION: u32 = 1;

/// One demonstrated drive: what the network saw at each step and what was
/// done, as a collector records a rollout.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Demo {
    /// Where it came from: an input file, or `FILE:LINE` of saved trajectories.
    pub source: String,
    /// The map's name ([`rulka_config::prompt_name`]).
    pub map: String,
    /// The track seed (simulator) or map index (game) it was driven on.
    pub track_seed: u64,
    /// The environment that drove it (`sim easy`, `sim line NAME`, `tmi`).
    pub environment: String,
    /// [`Config::network_hash`] of the config whose observation code made it.
    pub network_hash: String,
    /// Bytes per frame.
    pub frame_len: usize,
    /// Floats per step.
    pub n_floats: usize,
    /// Actions per step.
    pub n_heads: usize,
    /// `n × frame_len` frames.
    pub frames: Vec<u8>,
    /// `n × n_floats` raw floats.
    pub floats: Vec<f32>,
    /// `n × n_heads` actions (indices of [`rulka_config::ACTION_KEYS`]).
    pub actions: Vec<i32>,
    /// `n × ingredients::COUNT` reward ingredients.
    pub ingredients: Vec<f32>,
    /// The race time when the drive finished.
    pub race_time_ms: Option<f64>,
}

impl Demo {
    /// Steps (states seen, the terminal one included).
    pub fn len(&self) -> usize {
        self.floats.len() / self.n_floats.max(1)
    }

    /// No steps.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Metres advanced along the centreline at step `i`.
    pub fn meters(&self, i: usize) -> f32 {
        self.ingredients[i * ingredients::COUNT + ingredients::METERS]
    }

    /// The shard's file name: the map, the source's stem and a digest of
    /// the source name and the actions, so re-recording a drive replaces
    /// its shard and two drives never share one.
    pub fn file_name(&self) -> String {
        let stem = Path::new(self.source.split(':').next().unwrap_or(&self.source))
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut h = Sha256::new();
        h.update(self.source.as_bytes());
        h.update(self.map.as_bytes());
        for a in &self.actions {
            h.update(a.to_le_bytes());
        }
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-') { c } else { '_' })
                .collect()
        };
        format!(
            "{}_{}_{}.safetensors",
            clean(&self.map),
            clean(&stem),
            &hex::encode(h.finalize())[..8]
        )
    }

    /// The shard's bytes.
    pub fn to_safetensors(&self) -> Vec<u8> {
        let n = self.len();
        let mut md = BTreeMap::new();
        md.insert("format", DEMO_FORMAT.to_string());
        md.insert("format_version", DEMO_FORMAT_VERSION.to_string());
        md.insert("network_hash", self.network_hash.clone());
        md.insert("map", self.map.clone());
        md.insert("track_seed", self.track_seed.to_string());
        md.insert("environment", self.environment.clone());
        md.insert("source", self.source.clone());
        md.insert("race_time_ms", self.race_time_ms.map(|t| t.to_string()).unwrap_or_default());
        md.insert("steps", n.to_string());
        let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let i32s = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let parts: [(&str, &str, Vec<usize>, Vec<u8>); 4] = [
            ("actions", "I32", vec![n, self.n_heads], i32s(&self.actions)),
            ("floats", "F32", vec![n, self.n_floats], f32s(&self.floats)),
            ("frames", "U8", vec![n, self.frame_len], self.frames.clone()),
            ("ingredients", "F32", vec![n, ingredients::COUNT], f32s(&self.ingredients)),
        ];
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::json!(md));
        let mut offset = 0usize;
        for (name, dtype, shape, data) in &parts {
            let end = offset + data.len();
            header.insert(
                (*name).into(),
                serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, end]}),
            );
            offset = end;
        }
        let mut json = serde_json::Value::Object(header).to_string().into_bytes();
        json.resize(json.len().div_ceil(8) * 8, b' ');
        let mut out = Vec::with_capacity(8 + json.len() + offset);
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        for (_, _, _, data) in &parts {
            out.extend_from_slice(data);
        }
        out
    }

    /// Parses a shard; `origin` names it in errors.
    pub fn from_safetensors(bytes: &[u8], origin: &Path) -> Result<Self, DemoError> {
        let corrupt = |message: String| DemoError::Corrupt { path: origin.to_path_buf(), message };
        let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| corrupt(format!("{e}")))?;
        let st = SafeTensors::deserialize(bytes).map_err(|e| corrupt(format!("{e}")))?;
        let md = header.metadata().clone().unwrap_or_default();
        if md.get("format").map(String::as_str) != Some(DEMO_FORMAT) {
            return Err(DemoError::Mismatch {
                path: origin.to_path_buf(),
                message: format!("not a demonstration shard (format {:?})", md.get("format")),
            });
        }
        let version = md.get("format_version").cloned().unwrap_or_default();
        if version != DEMO_FORMAT_VERSION.to_string() {
            return Err(DemoError::Mismatch {
                path: origin.to_path_buf(),
                message: format!(
                    "shard format version {version}; this rulka reads {DEMO_FORMAT_VERSION}"
                ),
            });
        }
        let get = |name: &str, dtype: Dtype| -> Result<(Vec<usize>, Vec<u8>), DemoError> {
            let v = st.tensor(name).map_err(|e| corrupt(format!("{name}: {e}")))?;
            if v.dtype() != dtype {
                return Err(corrupt(format!("{name} is {:?}, not {dtype:?}", v.dtype())));
            }
            Ok((v.shape().to_vec(), v.data().to_vec()))
        };
        let f32s = |b: &[u8]| {
            b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        };
        let (fs, frames) = get("frames", Dtype::U8)?;
        let (ls, floats) = get("floats", Dtype::F32)?;
        let (a_s, actions) = get("actions", Dtype::I32)?;
        let (is, ingr) = get("ingredients", Dtype::F32)?;
        let n = ls.first().copied().unwrap_or(0);
        let two = |s: &[usize]| s.len() == 2 && s[0] == n;
        if !(two(&fs) && two(&ls) && two(&a_s) && two(&is)) || is[1] != ingredients::COUNT {
            return Err(corrupt(format!(
                "shapes frames {fs:?}, floats {ls:?}, actions {a_s:?}, ingredients {is:?} disagree"
            )));
        }
        if n == 0 {
            return Err(corrupt("no steps".into()));
        }
        let text = |k: &str| md.get(k).cloned().unwrap_or_default();
        let race = text("race_time_ms");
        Ok(Self {
            source: text("source"),
            map: text("map"),
            track_seed: text("track_seed").parse().map_err(|_| corrupt("track_seed".into()))?,
            environment: text("environment"),
            network_hash: text("network_hash"),
            frame_len: fs[1],
            n_floats: ls[1],
            n_heads: a_s[1],
            frames,
            floats: f32s(&floats),
            actions: actions
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            ingredients: f32s(&ingr),
            race_time_ms: if race.is_empty() {
                None
            } else {
                Some(race.parse().map_err(|_| corrupt(format!("race_time_ms {race:?}")))?)
            },
        })
    }
}

/// The environment a config drives, as a shard records it.
pub fn environment_label(cfg: &Config) -> String {
    let e = &cfg.environment;
    match e.kind {
        EnvKind::Sim => match &e.sim.track_from {
            Some(p) => format!("sim line {}", p.display()),
            None => format!("sim {:?}", e.sim.track).to_lowercase(),
        },
        EnvKind::Tmi => "tmi".into(),
    }
}

/// The maps `cfg` trains on, by name.
pub fn config_maps(cfg: &Config) -> Vec<String> {
    let e = &cfg.environment;
    match e.kind {
        EnvKind::Sim => e.sim.track_seeds.iter().map(|&s| prompt_name(cfg, s)).collect(),
        EnvKind::Tmi => (0..e.tmi.maps.len() as u64).map(|i| prompt_name(cfg, i)).collect(),
    }
}

/// Writes `demos` into `dir` (created if needed), each shard atomically;
/// returns the paths written. Call it once every drive is recorded, so a
/// refused input leaves nothing half-written.
pub fn write_demos(dir: &Path, demos: &[Demo]) -> Result<Vec<PathBuf>, DemoError> {
    std::fs::create_dir_all(dir)
        .map_err(|error| DemoError::Io { path: dir.to_path_buf(), error })?;
    let mut written = Vec::new();
    for d in demos {
        let path = dir.join(d.file_name());
        rulka_checkpoint::write_atomic(&path, &d.to_safetensors())
            .map_err(|e| DemoError::Corrupt { path: path.clone(), message: e.to_string() })?;
        written.push(path);
    }
    Ok(written)
}

/// Every shard of `dir` (`*.safetensors`, in name order), checked against
/// `cfg`: made with its network's observation code (`network_hash`), on one
/// of its maps, in its environment. The first shard that is not is an error
/// naming it.
pub fn read_demos(dir: &Path, cfg: &Config) -> Result<Vec<Demo>, DemoError> {
    let io = |error| DemoError::Io { path: dir.to_path_buf(), error };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(DemoError::Mismatch {
            path: dir.to_path_buf(),
            message: "no demonstration shards (*.safetensors); make them with `rulka demos record`"
                .into(),
        });
    }
    let (hash, maps, env) = (cfg.network_hash(), config_maps(cfg), environment_label(cfg));
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let bytes = std::fs::read(&p).map_err(|error| DemoError::Io { path: p.clone(), error })?;
        let d = Demo::from_safetensors(&bytes, &p)?;
        let mismatch = |message: String| DemoError::Mismatch { path: p.clone(), message };
        if d.network_hash != hash {
            return Err(mismatch(format!(
                "recorded for network {}, the config's is {hash}: record the drives again with this config",
                d.network_hash
            )));
        }
        if d.environment != env || !maps.contains(&d.map) {
            return Err(mismatch(format!(
                "map {} ({}) is not one the config trains on ({}: {})",
                d.map,
                d.environment,
                env,
                maps.join(", ")
            )));
        }
        if d.n_floats != cfg.float_input_dim() || d.n_heads != cfg.n_action_heads() {
            return Err(mismatch(format!(
                "{} floats and {} heads per step; the config has {} and {}",
                d.n_floats,
                d.n_heads,
                cfg.float_input_dim(),
                cfg.n_action_heads()
            )));
        }
        out.push(d);
    }
    Ok(out)
}
