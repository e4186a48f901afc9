//! GGUF: a bounded reader of llama.cpp's checkpoint format, versions 2 and 3, little-endian.
//!
//! The reader trusts nothing it reads. Every count and length is checked against the bytes left and
//! against the limits below before anything is allocated, every product of sizes is checked for
//! overflow, and every tensor's data must lie inside the file, in bytes no other tensor's data
//! takes. A file that breaks a rule is a [`GgufError`] that names the rule, the byte offset and the
//! key or tensor; it is never a panic. Memory the reader allocates, and the values of all its tensors
//! together, are bounded by a small multiple of the file's size.
//!
//! GGUF lists a tensor's dims innermost first (`ne[0]` varies fastest). [`TensorInfo::shape`] is
//! their reverse, outermost first, so that an HF `[out, in]` matrix (stored `ne = [in, out]`) reads as
//! `[out, in]`, and the values `read_f32` returns are row-major in that shape.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use half::{bf16, f16};

use super::quants::{self, QuantError, iq4, kquants, legacy};

/// The first four bytes of every GGUF file.
pub(crate) const MAGIC: [u8; 4] = *b"GGUF";
/// The alignment of tensor data when `general.alignment` does not say otherwise.
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;
/// The largest `general.alignment` accepted (it must also be a power of two).
pub(crate) const MAX_ALIGNMENT: u64 = 1 << 20;
/// The longest metadata key or tensor name, in bytes (GGUF's own limit on keys).
pub(crate) const MAX_NAME_LEN: u64 = 65_535;
/// The longest string value, in bytes.
pub(crate) const MAX_STRING_LEN: u64 = 1 << 26;
/// The most elements one array value may hold.
pub(crate) const MAX_ARRAY_LEN: u64 = 1 << 26;
/// How deep arrays may nest: an array value is depth 1, an array inside it depth 2.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// The most tensors a file may list.
pub(crate) const MAX_TENSORS: u64 = 1 << 20;
/// The most metadata entries a file may hold.
pub(crate) const MAX_KVS: u64 = 1 << 20;
/// The most dims a tensor may have (ggml's `GGML_MAX_DIMS`).
pub(crate) const MAX_DIMS: u32 = 4;
/// The key whose value sets the alignment of tensor data.
pub(crate) const ALIGNMENT_KEY: &str = "general.alignment";

/// The fewest bytes a metadata entry takes: an empty key's length, a type and a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// The fewest bytes a tensor info takes: an empty name's length, no dims, a type and an offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// Why a byte string is not a GGUF file this reader accepts. Offsets are bytes from the start of the
/// file; `what` says what was being read, with the key or tensor it belongs to.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not a GGUF file: it starts with {found:?}, not \"GGUF\"")]
    BadMagic { found: [u8; 4] },
    #[error("GGUF version {version} is not supported: this reader reads versions 2 and 3, little-endian")]
    UnsupportedVersion { version: u32 },
    #[error("truncated at byte {offset}: {what} needs {needed} bytes, {left} are left")]
    Truncated { offset: u64, what: String, needed: u64, left: u64 },
    #[error("{what} at byte {offset} is {count}, more than the {max} that the bytes left and the limits allow")]
    CountTooLarge { offset: u64, what: String, count: u64, max: u64 },
    #[error("{what} at byte {offset} is not UTF-8")]
    NotUtf8 { offset: u64, what: String },
    #[error("{what} at byte {offset} has unknown value type {type_id}")]
    UnknownValueType { offset: u64, what: String, type_id: u32 },
    #[error("{what} at byte {offset} is a bool of byte {byte}, neither 0 nor 1")]
    BadBool { offset: u64, what: String, byte: u8 },
    #[error("{what} at byte {offset} nests arrays deeper than {max}")]
    ArrayTooDeep { offset: u64, what: String, max: usize },
    #[error("metadata key `{key}` appears twice, again at byte {offset}")]
    DuplicateKey { offset: u64, key: String },
    #[error("`general.alignment` is {found}; it must be a power of two no larger than {max}")]
    BadAlignment { found: String, max: u64 },
    #[error("tensor `{tensor}` at byte {offset} has {n_dims} dims; GGUF allows at most {max}", max = MAX_DIMS)]
    TooManyDims { offset: u64, tensor: String, n_dims: u32 },
    #[error("tensor `{tensor}`: its dims {ne:?} (innermost first) overflow")]
    DimsOverflow { tensor: String, ne: Vec<u64> },
    #[error("tensor `{tensor}`: {type_name} stores rows in blocks of {block} values, but its rows hold {ne0}")]
    PartialBlock { tensor: String, type_name: &'static str, ne0: u64, block: u64 },
    #[error("tensor `{tensor}` is of unknown ggml type {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },
    #[error("tensor `{tensor}` is of ggml type {type_name} ({type_id}), which this reader does not decode")]
    UnsupportedTensorType { tensor: String, type_name: &'static str, type_id: u32 },
    #[error("tensor `{tensor}`: {source}")]
    Decode {
        tensor: String,
        #[source]
        source: QuantError,
    },
    #[error(
        "tensor `{tensor}`: its {n_bytes} bytes at data offset {offset} (the data starts at byte {data_start}) \
         run past the end of the file of {file_len} bytes"
    )]
    OutOfBounds { tensor: String, offset: u64, n_bytes: u64, data_start: u64, file_len: u64 },
    #[error("tensor `{tensor}` appears twice, again at byte {offset}")]
    DuplicateTensor { offset: u64, tensor: String },
    #[error("tensor `{tensor}`: its data offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedOffset { tensor: String, offset: u64, alignment: u64 },
    #[error("tensor `{tensor}`: its data at offset {offset} overlaps the data of tensor `{other}`")]
    OverlappingData { tensor: String, offset: u64, other: String },
}

/// A result whose error is a [`GgufError`].
pub type Result<T, E = GgufError> = std::result::Result<T, E>;

/// A metadata value. Two values are equal when they are the same bits in a file (see `PartialEq`).
#[derive(Clone, Debug)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An array value: its elements, all of one type. Elements are stored by type so that an array takes
/// about as much memory as its bytes in the file.
#[derive(Clone, Debug)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    /// Arrays of arrays; each inner array has its own element type.
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

/// Values are equal when a file would store them as the same bits: floats compare by their bits, so a
/// NaN read twice is one value (and 0.0 and −0.0 are two), which keeps "parsed twice, read the same"
/// a statement that can hold.
impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        use Value as V;
        match (self, other) {
            (V::F32(a), V::F32(b)) => a.to_bits() == b.to_bits(),
            (V::F64(a), V::F64(b)) => a.to_bits() == b.to_bits(),
            (V::U8(a), V::U8(b)) => a == b,
            (V::I8(a), V::I8(b)) => a == b,
            (V::U16(a), V::U16(b)) => a == b,
            (V::I16(a), V::I16(b)) => a == b,
            (V::U32(a), V::U32(b)) => a == b,
            (V::I32(a), V::I32(b)) => a == b,
            (V::U64(a), V::U64(b)) => a == b,
            (V::I64(a), V::I64(b)) => a == b,
            (V::Bool(a), V::Bool(b)) => a == b,
            (V::String(a), V::String(b)) => a == b,
            (V::Array(a), V::Array(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

/// Arrays are equal element by element under the rule of [`Value`]'s equality: floats by their bits.
impl PartialEq for Array {
    fn eq(&self, other: &Self) -> bool {
        use Array as A;
        match (self, other) {
            (A::F32(a), A::F32(b)) => a.iter().map(|x| x.to_bits()).eq(b.iter().map(|x| x.to_bits())),
            (A::F64(a), A::F64(b)) => a.iter().map(|x| x.to_bits()).eq(b.iter().map(|x| x.to_bits())),
            (A::U8(a), A::U8(b)) => a == b,
            (A::I8(a), A::I8(b)) => a == b,
            (A::U16(a), A::U16(b)) => a == b,
            (A::I16(a), A::I16(b)) => a == b,
            (A::U32(a), A::U32(b)) => a == b,
            (A::I32(a), A::I32(b)) => a == b,
            (A::U64(a), A::U64(b)) => a == b,
            (A::I64(a), A::I64(b)) => a == b,
            (A::Bool(a), A::Bool(b)) => a == b,
            (A::String(a), A::String(b)) => a == b,
            (A::Array(a), A::Array(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Array {}

/// The GGUF value type ids, in the format's numbering.
pub mod value_type {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub(crate) const STRING: u32 = 8;
    pub(crate) const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;

    /// The name of value type `id`, if GGUF defines it.
    pub fn name(id: u32) -> Option<&'static str> {
        const NAMES: [&str; 13] =
            ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"];
        NAMES.get(usize::try_from(id).ok()?).copied()
    }
}

impl Value {
    /// The GGUF type id of this value.
    pub fn type_id(&self) -> u32 {
        use value_type as t;
        match self {
            Value::U8(_) => t::U8,
            Value::I8(_) => t::I8,
            Value::U16(_) => t::U16,
            Value::I16(_) => t::I16,
            Value::U32(_) => t::U32,
            Value::I32(_) => t::I32,
            Value::F32(_) => t::F32,
            Value::Bool(_) => t::BOOL,
            Value::String(_) => t::STRING,
            Value::Array(_) => t::ARRAY,
            Value::U64(_) => t::U64,
            Value::I64(_) => t::I64,
            Value::F64(_) => t::F64,
        }
    }

    /// The GGUF name of this value's type (`u32`, `string`, …).
    pub fn type_name(&self) -> &'static str {
        value_type::name(self.type_id()).unwrap_or("?")
    }

    /// The value as a u64, if it is an integer of any width and not negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as an f64, if it is an f32 or an f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a string slice, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a bool, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as an array, if it is one.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Shows the type and a short rendering of the value: `u32 4`, `string "qwen35"`, `array of 3 u32`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.type_name();
        match self {
            Value::U8(v) => write!(f, "{t} {v}"),
            Value::I8(v) => write!(f, "{t} {v}"),
            Value::U16(v) => write!(f, "{t} {v}"),
            Value::I16(v) => write!(f, "{t} {v}"),
            Value::U32(v) => write!(f, "{t} {v}"),
            Value::I32(v) => write!(f, "{t} {v}"),
            Value::F32(v) => write!(f, "{t} {v}"),
            Value::Bool(v) => write!(f, "{t} {v}"),
            Value::U64(v) => write!(f, "{t} {v}"),
            Value::I64(v) => write!(f, "{t} {v}"),
            Value::F64(v) => write!(f, "{t} {v}"),
            Value::String(s) => {
                let short: String = s.chars().take(40).collect();
                let more = if short.len() < s.len() { "…" } else { "" };
                write!(f, "{t} {short:?}{more}")
            }
            Value::Array(a) => write!(f, "array of {} {}", a.len(), a.elem_type_name()),
        }
    }
}

impl Array {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF type id of its elements.
    pub fn elem_type_id(&self) -> u32 {
        use value_type as t;
        match self {
            Array::U8(_) => t::U8,
            Array::I8(_) => t::I8,
            Array::U16(_) => t::U16,
            Array::I16(_) => t::I16,
            Array::U32(_) => t::U32,
            Array::I32(_) => t::I32,
            Array::F32(_) => t::F32,
            Array::Bool(_) => t::BOOL,
            Array::String(_) => t::STRING,
            Array::Array(_) => t::ARRAY,
            Array::U64(_) => t::U64,
            Array::I64(_) => t::I64,
            Array::F64(_) => t::F64,
        }
    }

    /// The GGUF name of its elements' type.
    pub(crate) fn elem_type_name(&self) -> &'static str {
        value_type::name(self.elem_type_id()).unwrap_or("?")
    }

    /// The elements as u64s, if they are integers of any width and none is negative.
    pub fn as_u64s(&self) -> Option<Vec<u64>> {
        fn all<T: Copy>(v: &[T]) -> Option<Vec<u64>>
        where
            u64: TryFrom<T>,
        {
            v.iter().map(|&x| u64::try_from(x).ok()).collect()
        }
        match self {
            Array::U8(v) => all(v),
            Array::I8(v) => all(v),
            Array::U16(v) => all(v),
            Array::I16(v) => all(v),
            Array::U32(v) => all(v),
            Array::I32(v) => all(v),
            Array::U64(v) => all(v),
            Array::I64(v) => all(v),
            _ => None,
        }
    }
}

/// A ggml tensor type, by its id. The reader knows the block sizes of ggml's types, so that it can
/// bound every tensor's data, and decodes to f32 the float types F32, F16 and BF16, the legacy
/// quants Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, the k-quants Q2_K to Q6_K, and IQ4_NL and IQ4_XS, each
/// bit for bit as ggml does (see [`quants`]). Decoded values take at most 1024 / 84 ≈ 12.2 times the
/// bytes they were stored in (Q2_K: 84 bytes per 256 values), the widest expansion of these types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

/// Decodes a run of whole blocks of one ggml type to f32; bytes that end inside a block are an
/// error.
pub(crate) type Decoder = fn(&[u8]) -> Result<Vec<f32>, QuantError>;

/// ggml's tensor types: id, name, values per block, bytes per block.
const GGML_TYPES: [(u32, &str, u64, u64); 32] = [
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

impl GgmlType {
    pub const F32: GgmlType = GgmlType(0);
    pub const F16: GgmlType = GgmlType(1);
    pub const Q4_0: GgmlType = GgmlType(2);
    pub const Q4_1: GgmlType = GgmlType(3);
    pub const Q5_0: GgmlType = GgmlType(6);
    pub const Q5_1: GgmlType = GgmlType(7);
    pub const Q8_0: GgmlType = GgmlType(8);
    pub const Q2_K: GgmlType = GgmlType(10);
    pub const Q3_K: GgmlType = GgmlType(11);
    pub const Q4_K: GgmlType = GgmlType(12);
    pub const Q5_K: GgmlType = GgmlType(13);
    pub const Q6_K: GgmlType = GgmlType(14);
    pub const IQ4_NL: GgmlType = GgmlType(20);
    pub const IQ4_XS: GgmlType = GgmlType(23);
    pub const BF16: GgmlType = GgmlType(30);

    fn entry(self) -> Option<&'static (u32, &'static str, u64, u64)> {
        GGML_TYPES.iter().find(|e| e.0 == self.0)
    }

    /// ggml's name of the type (`F32`, `Q4_K`, …), if ggml defines it.
    pub fn name(self) -> Option<&'static str> {
        self.entry().map(|e| e.1)
    }

    /// The values per block and bytes per block, if ggml defines the type.
    pub fn block(self) -> Option<(u64, u64)> {
        self.entry().map(|e| (e.2, e.3))
    }

    /// Whether this reader decodes the type to f32.
    pub fn decodes(self) -> bool {
        self.decoder().is_some()
    }

    /// The function that decodes whole blocks of this type to f32, if the reader has one.
    pub fn decoder(self) -> Option<Decoder> {
        Some(match self {
            GgmlType::F32 => decode_f32,
            GgmlType::F16 => decode_f16,
            GgmlType::BF16 => decode_bf16,
            GgmlType::Q4_0 => legacy::dequantize_q4_0,
            GgmlType::Q4_1 => legacy::dequantize_q4_1,
            GgmlType::Q5_0 => legacy::dequantize_q5_0,
            GgmlType::Q5_1 => legacy::dequantize_q5_1,
            GgmlType::Q8_0 => legacy::dequantize_q8_0,
            GgmlType::Q2_K => kquants::dequantize_q2_k,
            GgmlType::Q3_K => kquants::dequantize_q3_k,
            GgmlType::Q4_K => kquants::dequantize_q4_k,
            GgmlType::Q5_K => kquants::dequantize_q5_k,
            GgmlType::Q6_K => kquants::dequantize_q6_k,
            GgmlType::IQ4_NL => iq4::dequantize_iq4_nl,
            GgmlType::IQ4_XS => iq4::dequantize_iq4_xs,
            _ => return None,
        })
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "type {}", self.0),
        }
    }
}

/// A tensor's entry in the file: its name, dims, type and where its data lies.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// The dims as stored, innermost first (ggml's `ne`).
    pub ne: Vec<u64>,
    /// The dims outermost first: `ne` reversed. An HF `[out, in]` matrix reads as `[out, in]`.
    pub shape: Vec<usize>,
    pub ggml_type: GgmlType,
    /// Where the data starts, in bytes from the start of the data section.
    pub offset: u64,
    /// The bytes of data, when the type is known.
    pub n_bytes: Option<u64>,
}

impl TensorInfo {
    /// The number of values: the product of the dims (1 for a tensor with no dims). It saturates at
    /// `usize::MAX`, which no parsed tensor reaches.
    pub fn numel(&self) -> usize {
        element_count(self.shape.iter().map(|&d| d as u64)).and_then(|n| usize::try_from(n).ok()).unwrap_or(usize::MAX)
    }
}

/// What a GGUF file says: its version, metadata and tensor infos, and where its data section lies.
/// It holds no tensor data; [`Gguf`] and [`GgufFile`] pair it with the bytes it was parsed from.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufInfo {
    pub version: u32,
    /// The alignment of tensor data: `general.alignment`, or 32.
    pub alignment: u64,
    /// The byte where the data section starts: the end of the tensor infos, aligned up.
    pub data_offset: u64,
    /// The length of the file, in bytes.
    pub file_len: u64,
    metadata: Vec<(String, Value)>,
    keys: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_names: HashMap<String, usize>,
}

impl GgufInfo {
    /// Parses the header, metadata and tensor infos of a GGUF file held in `bytes`, and checks that
    /// every tensor's data lies inside it.
    pub fn parse(bytes: &[u8]) -> Result<GgufInfo> {
        parse(bytes)
    }

    /// The metadata entries in file order.
    pub fn metadata_entries(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The value of metadata key `key`, if present.
    pub fn metadata(&self, key: &str) -> Option<&Value> {
        self.keys.get(key).and_then(|&i| self.metadata.get(i)).map(|(_, v)| v)
    }

    /// The value of `key` as a u64, if present and a non-negative integer of any width.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.metadata(key)?.as_u64()
    }

    /// The value of `key` as an f64, if present and an f32 or f64.
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.metadata(key)?.as_f64()
    }

    /// The value of `key` as a string, if present and a string.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.metadata(key)?.as_str()
    }

    /// The value of `key` as an array, if present and an array.
    pub fn get_array(&self, key: &str) -> Option<&Array> {
        self.metadata(key)?.as_array()
    }

    /// The tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor info named `name`, if any.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_names.get(name).and_then(|&i| self.tensors.get(i))
    }

    /// The values of tensor `t`, row-major in its shape, widened to f32. `bytes` must be the bytes
    /// the info was parsed from; the data range is computed from `t.ne` and `t.ggml_type` and
    /// checked again, so a hand-made `TensorInfo` is an error at worst.
    fn read_f32(&self, bytes: &[u8], t: &TensorInfo) -> Result<Vec<f32>> {
        let decode = self.decoder_of(t)?;
        let range = self.data_range(bytes.len(), t)?;
        decode(&bytes[range]).map_err(|source| GgufError::Decode { tensor: t.name.clone(), source })
    }

    /// The decoder of tensor `t`'s type, or the error naming a type this reader does not know or
    /// does not decode.
    fn decoder_of(&self, t: &TensorInfo) -> Result<Decoder> {
        let ty = t.ggml_type;
        let Some(type_name) = ty.name() else {
            return Err(GgufError::UnknownTensorType { tensor: t.name.clone(), type_id: ty.0 });
        };
        ty.decoder().ok_or_else(|| GgufError::UnsupportedTensorType {
            tensor: t.name.clone(),
            type_name,
            type_id: ty.0,
        })
    }

    /// Where tensor `t`'s data lies in a file of `file_len` bytes (the one the info was parsed
    /// from): computed from `t.ne` and `t.ggml_type` and checked again, after checking that the
    /// type decodes, so that the bytes can be read in place as the type they claim to be.
    pub fn data_range(&self, file_len: usize, t: &TensorInfo) -> Result<std::ops::Range<usize>> {
        self.decoder_of(t)?;
        let (_, n_bytes) = sizes(&t.name, &t.ne, t.ggml_type)?;
        let n_bytes = n_bytes.unwrap_or(0);
        let out_of_bounds = || GgufError::OutOfBounds {
            tensor: t.name.clone(),
            offset: t.offset,
            n_bytes,
            data_start: self.data_offset,
            file_len: file_len as u64,
        };
        let start = u128::from(self.data_offset) + u128::from(t.offset);
        let end = start + u128::from(n_bytes);
        let range = usize::try_from(start).ok().zip(usize::try_from(end).ok());
        range.filter(|&(_, e)| e <= file_len).map(|(s, e)| s..e).ok_or_else(out_of_bounds)
    }
}

/// F32: each value its 4 little-endian bytes.
fn decode_f32(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    quants::decode_blocks::<4, 1>("F32", data, |b, y| y[0] = f32::from_le_bytes(*b))
}

/// F16: each value its 2 little-endian bytes, widened exactly.
fn decode_f16(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    quants::decode_blocks::<2, 1>("F16", data, |b, y| y[0] = f16::from_le_bytes(*b).to_f32())
}

/// BF16: each value its 2 little-endian bytes, the top half of an f32.
fn decode_bf16(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    quants::decode_blocks::<2, 1>("BF16", data, |b, y| y[0] = bf16::from_le_bytes(*b).to_f32())
}

/// The product of `dims`, `None` when it overflows: 0 when any dim is 0, whatever the others and
/// their order, so that a tensor's element count does not depend on which way its dims are read.
fn element_count(mut dims: impl Iterator<Item = u64> + Clone) -> Option<u64> {
    if dims.clone().any(|d| d == 0) { Some(0) } else { dims.try_fold(1u64, |n, d| n.checked_mul(d)) }
}

/// The shape (outermost first) and the data bytes (when the type is known) of a tensor with dims `ne`
/// of type `ty`. The product of the dims must fit ggml's i64 element count.
fn sizes(name: &str, ne: &[u64], ty: GgmlType) -> Result<(Vec<usize>, Option<u64>)> {
    let overflow = || GgufError::DimsOverflow { tensor: name.to_owned(), ne: ne.to_vec() };
    let numel = element_count(ne.iter().copied()).filter(|&n| i64::try_from(n).is_ok());
    let numel = numel.ok_or_else(overflow)?;
    let shape: Vec<usize> =
        ne.iter().rev().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>().ok_or_else(overflow)?;
    usize::try_from(numel).map_err(|_| overflow())?;
    let Some((block, block_bytes)) = ty.block() else { return Ok((shape, None)) };
    let ne0 = ne.first().copied().unwrap_or(1);
    if ne0 % block != 0 {
        let type_name = ty.name().unwrap_or("?");
        return Err(GgufError::PartialBlock { tensor: name.to_owned(), type_name, ne0, block });
    }
    let n_bytes = (numel / block).checked_mul(block_bytes).ok_or_else(overflow)?;
    Ok((shape, Some(n_bytes)))
}

/// A GGUF file held in memory: what it says and the bytes it was parsed from.
#[derive(Clone, Debug)]
pub struct Gguf<'a> {
    bytes: &'a [u8],
    info: GgufInfo,
}

impl<'a> Gguf<'a> {
    /// Parses `bytes` as a GGUF file (see [`GgufInfo::parse`]).
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>> {
        Ok(Gguf { bytes, info: parse(bytes)? })
    }

    /// What the file says.
    pub fn info(&self) -> &GgufInfo {
        &self.info
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The values of tensor `t`, row-major in its shape, widened to f32. A type this reader does not
    /// decode (see [`GgmlType`]) is an error naming the type and the tensor.
    pub fn read_f32(&self, t: &TensorInfo) -> Result<Vec<f32>> {
        self.info.read_f32(self.bytes, t)
    }
}

/// A GGUF file mapped into memory: what it says and its mapped bytes.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    map: Arc<crate::mapped::Mapped>,
    info: GgufInfo,
}

impl GgufFile {
    /// Maps the file at `path` and parses it (see [`GgufInfo::parse`]).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref().to_path_buf();
        let io = |source| GgufError::Io { path: path.clone(), source };
        let file = crate::open::open_regular(&path).map_err(io)?;
        GgufFile::of_open(path, &file)
    }

    /// Maps `file`, already open (it may have no name left: a file unlinked once created), and
    /// parses it; `path` names it in errors.
    pub fn of_open(path: PathBuf, file: &std::fs::File) -> Result<GgufFile> {
        let map =
            crate::mapped::map_file(file, &path).map_err(|source| GgufError::Io { path: path.clone(), source })?;
        let info = parse(&map)?;
        Ok(GgufFile { path, map: Arc::new(map), info })
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the file says.
    pub fn info(&self) -> &GgufInfo {
        &self.info
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The values of tensor `t`, row-major in its shape, widened to f32 (see [`Gguf::read_f32`]).
    pub fn read_f32(&self, t: &TensorInfo) -> Result<Vec<f32>> {
        self.info.read_f32(&self.map, t)
    }

    /// The mapped file, shared: a tensor read in place keeps it mapped.
    pub fn map(&self) -> Arc<crate::mapped::Mapped> {
        Arc::clone(&self.map)
    }
}

/// A cursor over the file's bytes. Every read is bounded by the bytes left; `what` describes what
/// is being read for the error, and is only called on failure.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

type What<'w> = &'w dyn Fn() -> String;

impl<'a> Reader<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn left(&self) -> u64 {
        self.buf.len().saturating_sub(self.pos) as u64
    }

    fn truncated(&self, needed: u64, what: What) -> GgufError {
        GgufError::Truncated { offset: self.offset(), what: what(), needed, left: self.left() }
    }

    fn take(&mut self, n: u64, what: What) -> Result<&'a [u8]> {
        let end = usize::try_from(n).ok().and_then(|n| self.pos.checked_add(n));
        match end.and_then(|end| self.buf.get(self.pos..end)) {
            Some(s) => {
                self.pos += s.len();
                Ok(s)
            }
            None => Err(self.truncated(n, what)),
        }
    }

    fn fixed<const N: usize>(&mut self, what: What) -> Result<[u8; N]> {
        match self.buf.get(self.pos..).and_then(<[u8]>::first_chunk::<N>) {
            Some(&a) => {
                self.pos += N;
                Ok(a)
            }
            None => Err(self.truncated(N as u64, what)),
        }
    }

    fn u32(&mut self, what: What) -> Result<u32> {
        self.fixed(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: What) -> Result<u64> {
        self.fixed(what).map(u64::from_le_bytes)
    }

    /// A u64 count of items of at least `min_bytes` each: at most `limit`, and no more than the
    /// bytes left can hold. A count within its limit whose items the bytes left cannot hold is a
    /// file cut short (`Truncated`); a count over its limit is `CountTooLarge`.
    fn count(&mut self, what: What, min_bytes: u64, limit: u64) -> Result<u64> {
        let offset = self.offset();
        let count = self.u64(what)?;
        let min_bytes = min_bytes.max(1);
        let left = self.left();
        if count <= limit && count > left / min_bytes {
            return Err(GgufError::Truncated {
                offset: self.offset(),
                what: match min_bytes {
                    1 => format!("{} at byte {offset} ({count} bytes)", what()),
                    _ => format!("{} at byte {offset} ({count} items of at least {min_bytes} bytes)", what()),
                },
                needed: count.saturating_mul(min_bytes),
                left,
            });
        }
        let max = (left / min_bytes).min(limit);
        if count > max {
            return Err(GgufError::CountTooLarge { offset, what: what(), count, max });
        }
        Ok(count)
    }

    /// A string: a u64 length of at most `limit`, then that many bytes of UTF-8.
    fn string(&mut self, what: What, limit: u64) -> Result<String> {
        let len = self.count(what, 1, limit)?;
        let offset = self.offset();
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| GgufError::NotUtf8 { offset, what: what() })
    }

    fn bool(&mut self, what: What) -> Result<bool> {
        let offset = self.offset();
        match self.fixed::<1>(what)? {
            [0] => Ok(false),
            [1] => Ok(true),
            [byte] => Err(GgufError::BadBool { offset, what: what(), byte }),
        }
    }

    /// A value of type `type_id`, read at `type_offset`; arrays nest at most [`MAX_ARRAY_DEPTH`].
    fn value(&mut self, type_id: u32, type_offset: u64, what: What, depth: usize) -> Result<Value> {
        use value_type as t;
        Ok(match type_id {
            t::U8 => Value::U8(u8::from_le_bytes(self.fixed(what)?)),
            t::I8 => Value::I8(i8::from_le_bytes(self.fixed(what)?)),
            t::U16 => Value::U16(u16::from_le_bytes(self.fixed(what)?)),
            t::I16 => Value::I16(i16::from_le_bytes(self.fixed(what)?)),
            t::U32 => Value::U32(u32::from_le_bytes(self.fixed(what)?)),
            t::I32 => Value::I32(i32::from_le_bytes(self.fixed(what)?)),
            t::F32 => Value::F32(f32::from_le_bytes(self.fixed(what)?)),
            t::BOOL => Value::Bool(self.bool(what)?),
            t::STRING => Value::String(self.string(what, MAX_STRING_LEN)?),
            t::ARRAY => Value::Array(self.array(what, depth + 1)?),
            t::U64 => Value::U64(u64::from_le_bytes(self.fixed(what)?)),
            t::I64 => Value::I64(i64::from_le_bytes(self.fixed(what)?)),
            t::F64 => Value::F64(f64::from_le_bytes(self.fixed(what)?)),
            type_id => return Err(GgufError::UnknownValueType { offset: type_offset, what: what(), type_id }),
        })
    }

    /// An array at nesting depth `depth`: its element type, its count, then its elements.
    fn array(&mut self, what: What, depth: usize) -> Result<Array> {
        use value_type as t;
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::ArrayTooDeep { offset: self.offset(), what: what(), max: MAX_ARRAY_DEPTH });
        }
        let type_offset = self.offset();
        let elem = self.u32(what)?;
        let min_bytes = match elem {
            t::U8 | t::I8 | t::BOOL => 1,
            t::U16 | t::I16 => 2,
            t::U32 | t::I32 | t::F32 => 4,
            t::U64 | t::I64 | t::F64 | t::STRING => 8,
            t::ARRAY => 12,
            type_id => return Err(GgufError::UnknownValueType { offset: type_offset, what: what(), type_id }),
        };
        let n = self.count(what, min_bytes, MAX_ARRAY_LEN)?;
        if matches!(elem, t::STRING | t::ARRAY) {
            return self.array_of_records(elem, n, what, depth);
        }
        // `n · min_bytes` cannot overflow: `count` bounded `n` by the bytes left over `min_bytes`.
        let at = self.offset();
        let bytes = self.take(n.saturating_mul(min_bytes), what)?;
        Ok(match elem {
            t::BOOL => Array::Bool(bools(bytes, at, what)?),
            t::U8 => Array::U8(bytes.to_vec()),
            t::I8 => Array::I8(bytes.iter().map(|&b| b as i8).collect()),
            t::U16 => Array::U16(le(bytes, u16::from_le_bytes)),
            t::I16 => Array::I16(le(bytes, i16::from_le_bytes)),
            t::U32 => Array::U32(le(bytes, u32::from_le_bytes)),
            t::I32 => Array::I32(le(bytes, i32::from_le_bytes)),
            t::F32 => Array::F32(le(bytes, f32::from_le_bytes)),
            t::U64 => Array::U64(le(bytes, u64::from_le_bytes)),
            t::I64 => Array::I64(le(bytes, i64::from_le_bytes)),
            _ => Array::F64(le(bytes, f64::from_le_bytes)),
        })
    }

    /// The `n` elements of an array of strings or arrays, each read and checked in turn. Nothing is
    /// reserved ahead: the vectors grow only with elements actually read, so a count the file
    /// cannot back costs no memory.
    fn array_of_records(&mut self, elem: u32, n: u64, what: What, depth: usize) -> Result<Array> {
        Ok(if elem == value_type::STRING {
            Array::String((0..n).map(|_| self.string(what, MAX_STRING_LEN)).collect::<Result<_>>()?)
        } else {
            Array::Array((0..n).map(|_| self.array(what, depth + 1)).collect::<Result<_>>()?)
        })
    }
}

/// Bools, one byte each, read at byte `at`: each must be 0 or 1.
fn bools(bytes: &[u8], at: u64, what: What) -> Result<Vec<bool>> {
    let mut out = Vec::with_capacity(bytes.len());
    for (i, &byte) in bytes.iter().enumerate() {
        match byte {
            0 | 1 => out.push(byte == 1),
            _ => return Err(GgufError::BadBool { offset: at.saturating_add(i as u64), what: what(), byte }),
        }
    }
    Ok(out)
}

/// Little-endian values of `N` bytes each, from `bytes` (whose length is a multiple of `N`).
fn le<const N: usize, T>(bytes: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    bytes.as_chunks::<N>().0.iter().map(|&b| from(b)).collect()
}

fn parse(bytes: &[u8]) -> Result<GgufInfo> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let magic = r.fixed::<4>(&|| "the magic".into())?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = r.u32(&|| "the version".into())?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let n_tensors = r.count(&|| "the tensor count".into(), MIN_TENSOR_INFO_BYTES, MAX_TENSORS)?;
    let n_kvs = r.count(&|| "the metadata count".into(), MIN_KV_BYTES, MAX_KVS)?;

    let mut metadata = Vec::new();
    let mut keys = HashMap::new();
    for i in 0..n_kvs {
        let key_offset = r.offset();
        let key = r.string(&|| format!("the key of metadata entry {i}"), MAX_NAME_LEN)?;
        if keys.contains_key(&key) {
            return Err(GgufError::DuplicateKey { offset: key_offset, key });
        }
        let type_offset = r.offset();
        let type_id = r.u32(&|| format!("the value type of `{key}`"))?;
        let value = r.value(type_id, type_offset, &|| format!("the value of `{key}`"), 0)?;
        keys.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }
    let alignment = match keys.get(ALIGNMENT_KEY).and_then(|&i| metadata.get(i)) {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => a,
            _ => return Err(GgufError::BadAlignment { found: v.to_string(), max: MAX_ALIGNMENT }),
        },
    };

    let mut infos = Vec::new();
    let mut tensor_names = HashMap::new();
    for i in 0..n_tensors {
        let name_offset = r.offset();
        let name = r.string(&|| format!("the name of tensor {i}"), MAX_NAME_LEN)?;
        if tensor_names.contains_key(&name) {
            return Err(GgufError::DuplicateTensor { offset: name_offset, tensor: name });
        }
        let dims_offset = r.offset();
        let n_dims = r.u32(&|| format!("the dim count of `{name}`"))?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::TooManyDims { offset: dims_offset, tensor: name, n_dims });
        }
        let mut ne = Vec::with_capacity(MAX_DIMS as usize);
        for d in 0..n_dims {
            ne.push(r.u64(&|| format!("dim {d} of `{name}`"))?);
        }
        let ggml_type = GgmlType(r.u32(&|| format!("the type of `{name}`"))?);
        let offset = r.u64(&|| format!("the data offset of `{name}`"))?;
        tensor_names.insert(name.clone(), infos.len());
        infos.push((name, ne, ggml_type, offset));
    }

    let infos_end = r.offset();
    let file_len = bytes.len() as u64;
    // `infos_end` is at most the file's length and `alignment` at most 2^20: no overflow.
    let data_offset = infos_end.div_ceil(alignment).saturating_mul(alignment);
    let mut tensors = Vec::with_capacity(infos.len());
    for (name, ne, ggml_type, offset) in infos {
        let (shape, n_bytes) = sizes(&name, &ne, ggml_type)?;
        if offset % alignment != 0 {
            return Err(GgufError::MisalignedOffset { tensor: name, offset, alignment });
        }
        let end = u128::from(data_offset) + u128::from(offset) + u128::from(n_bytes.unwrap_or(0));
        if end > u128::from(file_len) {
            let n_bytes = n_bytes.unwrap_or(0);
            return Err(GgufError::OutOfBounds { tensor: name, offset, n_bytes, data_start: data_offset, file_len });
        }
        tensors.push(TensorInfo { name, ne, shape, ggml_type, offset, n_bytes });
    }
    check_disjoint(&tensors)?;
    Ok(GgufInfo { version, alignment, data_offset, file_len, metadata, keys, tensors, tensor_names })
}

/// Refuses tensors whose data overlap. llama.cpp lays tensors out one after another and refuses any
/// other offset; this reader asks only that no byte belong to two tensors, which is what keeps the
/// values of all tensors together within a small multiple of the file's size. Tensors of no bytes,
/// or of a type whose size is unknown (never read), take no room.
fn check_disjoint(tensors: &[TensorInfo]) -> Result<()> {
    // Every end was checked to lie inside the file: no overflow.
    let mut ranges: Vec<(u64, u64, &str)> = tensors
        .iter()
        .filter_map(|t| t.n_bytes.filter(|&n| n > 0).map(|n| (t.offset, t.offset + n, t.name.as_str())))
        .collect();
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        if let [(_, end, other), (start, _, tensor)] = pair
            && start < end
        {
            return Err(GgufError::OverlappingData {
                tensor: (*tensor).into(),
                offset: *start,
                other: (*other).into(),
            });
        }
    }
    Ok(())
}
