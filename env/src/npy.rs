//! NumPy `.npy` files of 3-D points (`N×3`), read and written natively: the
//! original's per-map zone-centre files (`maps/*.npy`, the 0.5 m reference
//! line of a map).
//!
//! Accepted: format versions 1.0, 2.0 and 3.0; dtype `<f4` or `<f8` (`=` and
//! `|` byte orders on this little-endian format are taken as little-endian);
//! C order; shape `(N, 3)`. Anything else is an [`NpyError`] naming what was
//! found. [`write_points`] writes version 1.0, `<f8`, C order.

use std::path::{Path, PathBuf};

/// Why an `.npy` file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Not an `.npy` file, or a header this reader cannot parse.
    #[error("{path}: {message}")]
    Header {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A dtype other than little-endian f32/f64.
    #[error("{path}: dtype {descr:?} is not supported; expected '<f4' or '<f8' (float32/float64)")]
    Dtype {
        /// The file.
        path: PathBuf,
        /// The header's `descr`.
        descr: String,
    },
    /// Fortran (column-major) order.
    #[error("{path}: fortran_order is True; save the array in C order (np.ascontiguousarray)")]
    FortranOrder {
        /// The file.
        path: PathBuf,
    },
    /// A shape other than `(N, 3)`.
    #[error("{path}: shape {shape} is not (N, 3) with N >= {min_rows}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// The header's shape, as written there.
        shape: String,
        /// The fewest rows accepted.
        min_rows: usize,
    },
    /// The data is shorter or longer than the header says.
    #[error("{path}: {got} bytes of data; the header's shape and dtype need {expected}")]
    Length {
        /// The file.
        path: PathBuf,
        /// Bytes the header implies.
        expected: usize,
        /// Bytes present.
        got: usize,
    },
    /// A coordinate that is NaN or infinite.
    #[error("{path}: row {row} column {col} is {value}; points must be finite")]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// Row index.
        row: usize,
        /// Column index.
        col: usize,
        /// The value.
        value: f64,
    },
}

impl NpyError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        match self {
            Self::Io { .. } => rulka_error::ErrorKind::Failed,
            _ => rulka_error::ErrorKind::BadInput,
        }
    }
}

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Reads an `N×3` float array from `path` (at least `min_rows` rows).
pub fn read_points(path: &Path, min_rows: usize) -> Result<Vec<[f64; 3]>, NpyError> {
    let bytes =
        std::fs::read(path).map_err(|source| NpyError::Io { path: path.to_path_buf(), source })?;
    parse_points(&bytes, path, min_rows)
}

/// Parses the bytes of an `.npy` file; `path` names it in errors.
pub fn parse_points(bytes: &[u8], path: &Path, min_rows: usize) -> Result<Vec<[f64; 3]>, NpyError> {
    let header_err = |message: String| NpyError::Header { path: path.to_path_buf(), message };
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(header_err(format!(
            "not a NumPy .npy file (no \\x93NUMPY magic in the first {} bytes)",
            bytes.len().min(6)
        )));
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (header_len, start) = match major {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10usize),
        2 | 3 if bytes.len() >= 12 => {
            (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
        }
        _ => return Err(header_err(format!("format version {major}.{minor} is not supported"))),
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| header_err(format!("header of {header_len} bytes runs past the end")))?;
    let header = std::str::from_utf8(&bytes[start..end])
        .map_err(|_| header_err("header is not text".into()))?;
    let descr = dict_value(header, "descr")
        .ok_or_else(|| header_err(format!("no 'descr' in header {header:?}")))?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"').to_string();
    let width = match descr.as_str() {
        "<f4" | "=f4" | "|f4" => 4,
        "<f8" | "=f8" | "|f8" => 8,
        _ => return Err(NpyError::Dtype { path: path.to_path_buf(), descr }),
    };
    let fortran = dict_value(header, "fortran_order")
        .ok_or_else(|| header_err(format!("no 'fortran_order' in header {header:?}")))?;
    match fortran.as_str() {
        "False" => {}
        "True" => return Err(NpyError::FortranOrder { path: path.to_path_buf() }),
        other => return Err(header_err(format!("fortran_order {other:?} is not True/False"))),
    }
    let shape_text = dict_value(header, "shape")
        .ok_or_else(|| header_err(format!("no 'shape' in header {header:?}")))?;
    let dims: Vec<Option<usize>> = shape_text
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect();
    let rows = match dims.as_slice() {
        [Some(n), Some(3)] if *n >= min_rows => *n,
        _ => return Err(NpyError::Shape { path: path.to_path_buf(), shape: shape_text, min_rows }),
    };
    let data = &bytes[end..];
    let expected = rows * 3 * width;
    if data.len() != expected {
        return Err(NpyError::Length { path: path.to_path_buf(), expected, got: data.len() });
    }
    let mut out = Vec::with_capacity(rows);
    for (row, chunk) in data.chunks_exact(3 * width).enumerate() {
        let mut p = [0.0; 3];
        for (col, v) in chunk.chunks_exact(width).enumerate() {
            let x = if width == 4 {
                f64::from(f32::from_le_bytes([v[0], v[1], v[2], v[3]]))
            } else {
                f64::from_le_bytes([v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]])
            };
            if !x.is_finite() {
                return Err(NpyError::NonFinite { path: path.to_path_buf(), row, col, value: x });
            }
            p[col] = x;
        }
        out.push(p);
    }
    Ok(out)
}

/// The text of `key`'s value in a header dict literal such as
/// `{'descr': '<f8', 'fortran_order': False, 'shape': (12, 3), }`.
fn dict_value(header: &str, key: &str) -> Option<String> {
    let at = header.find(&format!("'{key}'")).or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = header[at + key.len() + 2..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find(',').or_else(|| rest.find('}'))?
    };
    Some(rest[..end].trim().to_string())
}

/// The `.npy` bytes (version 1.0, `<f8`, C order) of `points`.
pub fn encode_points(points: &[[f64; 3]]) -> Vec<u8> {
    let mut header =
        format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({}, 3), }}", points.len());
    // Pad with spaces so that magic + version + length + header + '\n' is a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for p in points {
        for x in p {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out
}

/// Writes `points` to `path` as [`encode_points`] does.
pub fn write_points(path: &Path, points: &[[f64; 3]]) -> Result<(), NpyError> {
    std::fs::write(path, encode_points(points))
        .map_err(|source| NpyError::Io { path: path.to_path_buf(), source })
}
