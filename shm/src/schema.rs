//! Record schemas: what a segment or a chunk holds, field by field
//! (portable: chunks travel over NATS from collectors on any platform).

use serde::{Deserialize, Serialize};

#[cfg(unix)]
use crate::ShmError;

/// Largest encoded schema a segment header holds.
pub const SCHEMA_CAPACITY: usize = 3072;

/// What a segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u32)]
pub enum SegmentKind {
    /// A rollout ring.
    Ring = 1,
    /// A weight-snapshot board.
    Board = 2,
}

/// Element type of a record field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// Unsigned byte.
    U8,
    /// 32-bit float.
    F32,
    /// 32-bit signed integer.
    I32,
    /// 64-bit unsigned integer.
    U64,
}

/// One field of a record: name, element type, per-step shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// Field name.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Shape of one step's value (empty for a scalar).
    pub shape: Vec<usize>,
}

/// The record schema stored in a segment header; openers must present the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Schema {
    /// Fields, in record order.
    pub fields: Vec<Field>,
    /// Free-form parameters that shape records (e.g. `max_steps`).
    pub params: Vec<(String, u64)>,
}

impl Schema {
    #[cfg(unix)]
    pub(crate) fn encode(&self) -> Result<Vec<u8>, ShmError> {
        let bytes = serde_json::to_vec(self).map_err(|e| ShmError::SchemaTooLarge {
            len: 0,
            max: SCHEMA_CAPACITY,
            reason: e.to_string(),
        })?;
        if bytes.len() > SCHEMA_CAPACITY {
            return Err(ShmError::SchemaTooLarge {
                len: bytes.len(),
                max: SCHEMA_CAPACITY,
                reason: String::new(),
            });
        }
        Ok(bytes)
    }

    /// A one-line description (for error messages).
    pub fn describe(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}
