//! Writing what `torch.save` and `joblib.dump` write: a pickle (protocol 2,
//! the one `torch.save` uses) of plain Python values and float32 tensors,
//! and for `torch.save` the zip archive around it (`archive/data.pkl`, one
//! `archive/data/<key>` per tensor storage, `archive/version`,
//! `archive/byteorder`). Only the globals `torch.load(weights_only=True)`
//! accepts are written: `collections.OrderedDict`,
//! `torch._utils._rebuild_tensor_v2` and `torch.FloatStorage`.
//!
//! Reading goes through the `pytorch-reader` crate (see [`crate::read`]).

use std::io::{Cursor, Write as _};

/// A Python value as the original's files hold it.
#[derive(Debug, Clone, PartialEq)]
pub enum Py {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// `int`.
    Int(i64),
    /// `float`.
    Float(f64),
    /// `str`.
    Str(String),
    /// `tuple`.
    Tuple(Vec<Py>),
    /// `list`.
    List(Vec<Py>),
    /// `dict`, in insertion order.
    Dict(Vec<(Py, Py)>),
    /// `collections.OrderedDict` with string keys (a module's `state_dict()`).
    OrderedDict(Vec<(String, Py)>),
    /// A contiguous CPU `torch.float32` tensor: shape and row-major values
    /// (an empty shape is a 0-d tensor holding one value).
    Tensor(Vec<usize>, Vec<f32>),
}

impl Py {
    /// A `str`.
    pub fn str(s: &str) -> Self {
        Py::Str(s.to_owned())
    }
}

// Pickle opcodes (CPython's Lib/pickle.py names).
const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const MARK: u8 = b'(';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const BINUNICODE: u8 = b'X';
const EMPTY_TUPLE: u8 = b')';
const TUPLE: u8 = b't';
const EMPTY_LIST: u8 = b']';
const APPENDS: u8 = b'e';
const EMPTY_DICT: u8 = b'}';
const SETITEMS: u8 = b'u';
const GLOBAL: u8 = b'c';
const REDUCE: u8 = b'R';
const BINPERSID: u8 = b'Q';

/// Pickles `value` (protocol 2) with its tensors' data set aside in
/// `storages` (tensor i is storage key `i`), as `torch.save` does.
struct Pickler<'a> {
    out: Vec<u8>,
    storages: Option<&'a mut Vec<Vec<f32>>>,
}

/// A tensor met where no storage can hold it (a plain pickle).
#[derive(Debug)]
pub struct TensorInPlainPickle;

impl Pickler<'_> {
    fn global(&mut self, module: &str, name: &str) {
        self.out.push(GLOBAL);
        self.out.extend_from_slice(module.as_bytes());
        self.out.push(b'\n');
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'\n');
    }

    fn int(&mut self, v: i64) {
        if (0..256).contains(&v) {
            self.out.extend_from_slice(&[BININT1, v as u8]);
        } else if let Ok(v) = i32::try_from(v) {
            self.out.push(BININT);
            self.out.extend_from_slice(&v.to_le_bytes());
        } else {
            // LONG1: two's complement, little-endian, 8 bytes suffice.
            self.out.extend_from_slice(&[LONG1, 8]);
            self.out.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn tuple_of_ints(&mut self, v: &[i64]) {
        if v.is_empty() {
            self.out.push(EMPTY_TUPLE);
            return;
        }
        self.out.push(MARK);
        for &x in v {
            self.int(x);
        }
        self.out.push(TUPLE);
    }

    fn value(&mut self, v: &Py) -> Result<(), TensorInPlainPickle> {
        match v {
            Py::None => self.out.push(NONE),
            Py::Bool(b) => self.out.push(if *b { NEWTRUE } else { NEWFALSE }),
            Py::Int(i) => self.int(*i),
            Py::Float(f) => {
                self.out.push(BINFLOAT);
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            Py::Str(s) => {
                self.out.push(BINUNICODE);
                self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                self.out.extend_from_slice(s.as_bytes());
            }
            Py::Tuple(items) => {
                if items.is_empty() {
                    self.out.push(EMPTY_TUPLE);
                } else {
                    self.out.push(MARK);
                    for x in items {
                        self.value(x)?;
                    }
                    self.out.push(TUPLE);
                }
            }
            Py::List(items) => {
                self.out.push(EMPTY_LIST);
                if !items.is_empty() {
                    self.out.push(MARK);
                    for x in items {
                        self.value(x)?;
                    }
                    self.out.push(APPENDS);
                }
            }
            Py::Dict(items) => {
                self.out.push(EMPTY_DICT);
                if !items.is_empty() {
                    self.out.push(MARK);
                    for (k, x) in items {
                        self.value(k)?;
                        self.value(x)?;
                    }
                    self.out.push(SETITEMS);
                }
            }
            Py::OrderedDict(items) => {
                self.global("collections", "OrderedDict");
                self.out.extend_from_slice(&[EMPTY_TUPLE, REDUCE]);
                if !items.is_empty() {
                    self.out.push(MARK);
                    for (k, x) in items {
                        self.value(&Py::Str(k.clone()))?;
                        self.value(x)?;
                    }
                    self.out.push(SETITEMS);
                }
            }
            Py::Tensor(shape, data) => self.tensor(shape, data)?,
        }
        Ok(())
    }

    /// `_rebuild_tensor_v2(storage, offset 0, size, stride, False, OrderedDict())`
    /// with the storage as the persistent id
    /// `('storage', torch.FloatStorage, key, 'cpu', numel)`.
    fn tensor(&mut self, shape: &[usize], data: &[f32]) -> Result<(), TensorInPlainPickle> {
        let Some(storages) = self.storages.as_deref_mut() else {
            return Err(TensorInPlainPickle);
        };
        let key = storages.len();
        storages.push(data.to_vec());
        self.global("torch._utils", "_rebuild_tensor_v2");
        self.out.push(MARK);
        self.out.push(MARK);
        self.value(&Py::str("storage"))?;
        self.global("torch", "FloatStorage");
        self.value(&Py::Str(key.to_string()))?;
        self.value(&Py::str("cpu"))?;
        self.int(data.len() as i64);
        self.out.extend_from_slice(&[TUPLE, BINPERSID]);
        self.int(0);
        let size: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let mut stride = vec![1i64; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            stride[i] = stride[i + 1] * size[i + 1];
        }
        self.tuple_of_ints(&size);
        self.tuple_of_ints(&stride);
        self.out.push(NEWFALSE);
        self.global("collections", "OrderedDict");
        self.out.extend_from_slice(&[EMPTY_TUPLE, REDUCE, TUPLE, REDUCE]);
        Ok(())
    }
}

fn pickle_with(
    value: &Py,
    storages: Option<&mut Vec<Vec<f32>>>,
) -> Result<Vec<u8>, TensorInPlainPickle> {
    let mut p = Pickler { out: vec![PROTO, 2], storages };
    p.value(value)?;
    p.out.push(STOP);
    Ok(p.out)
}

/// A plain pickle of `value` (what `joblib.dump` writes for a dict of plain
/// values); a tensor inside is an error.
pub fn plain_pickle(value: &Py) -> Result<Vec<u8>, TensorInPlainPickle> {
    pickle_with(value, None)
}

/// The bytes `torch.save(value, f)` writes for `value`: a zip archive
/// (entries stored, data 64-byte aligned as PyTorch aligns them) holding
/// the pickle and one storage per tensor.
pub fn torch_save(value: &Py) -> Result<Vec<u8>, zip::result::ZipError> {
    let mut storages = Vec::new();
    let pkl = pickle_with(value, Some(&mut storages))
        .map_err(|_| zip::result::ZipError::InvalidArchive("tensor outside torch.save".into()))?;
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .with_alignment(64);
    // The first entry names the archive folder torch.load looks in.
    zip.start_file("archive/data.pkl", opts)?;
    zip.write_all(&pkl)?;
    zip.start_file("archive/byteorder", opts)?;
    zip.write_all(b"little")?;
    for (key, data) in storages.iter().enumerate() {
        zip.start_file(format!("archive/data/{key}"), opts)?;
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        zip.write_all(&bytes)?;
    }
    zip.start_file("archive/version", opts)?;
    zip.write_all(b"3\n")?;
    Ok(zip.finish()?.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opcode sequences written out by hand from CPython's `pickle.dumps(v, 2)`
    /// (pickle's memo opcodes left out; they change nothing a loader sees).
    #[test]
    fn plain_values_are_pickled_as_python_pickles_them() {
        let v = Py::Dict(vec![
            (Py::str("a"), Py::Int(1)),
            (Py::Int(300), Py::Float(0.5)),
            (Py::str("t"), Py::Tuple(vec![Py::Bool(true), Py::None])),
            (Py::str("l"), Py::List(vec![Py::Int(-1)])),
        ]);
        let got = plain_pickle(&v).expect("no tensor");
        let mut want = vec![0x80, 2, b'}', b'('];
        want.extend_from_slice(b"X\x01\x00\x00\x00aK\x01");
        want.extend_from_slice(b"J\x2c\x01\x00\x00G\x3f\xe0\x00\x00\x00\x00\x00\x00");
        want.extend_from_slice(b"X\x01\x00\x00\x00t(\x88Nt");
        want.extend_from_slice(b"X\x01\x00\x00\x00l](J\xff\xff\xff\xffe");
        want.extend_from_slice(b"u.");
        assert_eq!(got, want);
    }

    #[test]
    fn a_tensor_needs_torch_save() {
        assert!(plain_pickle(&Py::Tensor(vec![1], vec![1.0])).is_err());
    }

    #[test]
    fn large_ints_use_long1() {
        let got = plain_pickle(&Py::Int(1 << 40)).expect("plain");
        assert_eq!(&got[2..], &[LONG1, 8, 0, 0, 0, 0, 0, 1, 0, 0, b'.']);
    }
}
