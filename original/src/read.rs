//! Reading `torch.save` and `joblib.dump` files with the `pytorch-reader`
//! crate, which parses the pickle without running any of it: a call to a
//! global it does not know becomes an opaque value, which
//! [`TorchFile::open`] refuses wherever a tensor is not expected.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use pytorch_reader::{DType, PickleValue, PytorchError, PytorchReader};

use crate::OriginalError;

/// One file: its tensors by dotted path (`state.0.exp_avg`) and every
/// other value as a tree.
pub(crate) struct TorchFile {
    pub path: PathBuf,
    tensors: HashMap<String, pytorch_reader::Tensor>,
    pub tree: PickleValue,
}

fn not_torch(path: &Path, e: PytorchError) -> OriginalError {
    match e {
        PytorchError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            OriginalError::Io { path: path.to_owned(), source: e }
        }
        other => OriginalError::NotReadable { path: path.to_owned(), reason: other.to_string() },
    }
}

impl TorchFile {
    /// Opens `path` (a `torch.save` zip, or a plain pickle such as an
    /// uncompressed joblib file), refusing a file that is not one and any
    /// object other than a tensor made by a call to a global.
    pub fn open(path: &Path) -> Result<Self, OriginalError> {
        if !path.is_file() {
            return Err(OriginalError::Io {
                path: path.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        let tensors = PytorchReader::new(path).map_err(|e| not_torch(path, e))?.into_tensors();
        let tree = PytorchReader::read_pickle_data(path, None).map_err(|e| not_torch(path, e))?;
        let file = Self { path: path.to_owned(), tensors, tree };
        file.refuse_unknown_objects(&file.tree, &mut Vec::new())?;
        Ok(file)
    }

    fn refuse_unknown_objects(
        &self,
        v: &PickleValue,
        at: &mut Vec<String>,
    ) -> Result<(), OriginalError> {
        match v {
            PickleValue::Dict(d) => {
                let mut keys: Vec<&String> = d.keys().collect();
                keys.sort();
                for k in keys {
                    at.push(k.clone());
                    self.refuse_unknown_objects(&d[k], at)?;
                    at.pop();
                }
            }
            PickleValue::List(items) => {
                for (i, x) in items.iter().enumerate() {
                    at.push(i.to_string());
                    self.refuse_unknown_objects(x, at)?;
                    at.pop();
                }
            }
            PickleValue::Unsupported(ty) if !self.tensors.contains_key(&at.join(".")) => {
                return Err(OriginalError::UnexpectedObject {
                    path: self.path.clone(),
                    at: at.join("."),
                    type_name: ty.clone(),
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// Every tensor name.
    pub fn tensor_names(&self) -> impl Iterator<Item = &String> {
        self.tensors.keys()
    }

    /// Whether a tensor `name` is in the file.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Shape of tensor `name`.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(pytorch_reader::Tensor::shape)
    }

    /// The float32 values of tensor `name` (row-major); another dtype is refused.
    pub fn f32(&self, name: &str) -> Result<Vec<f32>, OriginalError> {
        let t = self.tensors.get(name).ok_or_else(|| OriginalError::Missing {
            path: self.path.clone(),
            what: format!("tensor {name}"),
        })?;
        if t.dtype() != DType::F32 {
            return Err(OriginalError::Dtype {
                path: self.path.clone(),
                tensor: name.to_owned(),
                dtype: format!("{:?}", t.dtype()),
            });
        }
        let bytes = t.read().map_err(|e| OriginalError::NotReadable {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        Ok(bytes.chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// The number at `name`: a tensor of one element (float32, float64 or
    /// int64, as PyTorch ≥ 1.12 stores an optimizer's `step`), or a plain
    /// `int` / `float` of the tree (as older versions do).
    pub fn scalar(&self, name: &str) -> Option<f64> {
        let Some(t) = self.tensors.get(name) else {
            return self.value(name).and_then(number);
        };
        if t.num_elements() != 1 {
            return None;
        }
        let b = t.read().ok()?;
        match t.dtype() {
            DType::F32 => Some(f32::from_ne_bytes(b.get(..4)?.try_into().ok()?) as f64),
            DType::F64 => Some(f64::from_ne_bytes(b.get(..8)?.try_into().ok()?)),
            DType::I64 => Some(i64::from_ne_bytes(b.get(..8)?.try_into().ok()?) as f64),
            _ => None,
        }
    }

    /// The value at the dotted path `at` of the tree (`param_groups.0.lr`).
    pub fn value(&self, at: &str) -> Option<&PickleValue> {
        let mut v = &self.tree;
        for part in at.split('.').filter(|p| !p.is_empty()) {
            v = match v {
                PickleValue::Dict(d) => d.get(part)?,
                PickleValue::List(l) => l.get(part.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(v)
    }
}

/// A number (`int` or `float`).
pub(crate) fn number(v: &PickleValue) -> Option<f64> {
    match v {
        PickleValue::Int(i) => Some(*i as f64),
        PickleValue::Float(f) => Some(*f),
        _ => None,
    }
}

/// A `{str: number}` dict (entries that are not numbers are left out).
pub(crate) fn number_map(v: Option<&PickleValue>) -> BTreeMap<String, f64> {
    match v {
        Some(PickleValue::Dict(d)) => {
            d.iter().filter_map(|(k, v)| number(v).map(|x| (k.clone(), x))).collect()
        }
        _ => BTreeMap::new(),
    }
}
