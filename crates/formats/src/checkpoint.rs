//! Checkpoints: named tensors in the canonical GGUF conventions, each in its stored type.
//!
//! Whatever the source, a checkpoint holds its tensors under GGUF names with GGUF conventions: norm
//! weights hold the final multiplier, `ssm_a = −exp(A_log)`, `ssm_dt.bias` is the decay bias, the
//! convolution weight is `[C, K]`, and a qwen35 Gated-DeltaNet's value heads are in llama.cpp's tiled
//! order (value head `h` uses key head `h mod Hk`). Shapes are in row-major order, outermost first
//! (HF order: `[out, in]`).
//!
//! A tensor keeps the ggml type it is stored in (F32, BF16, Q8_0, Q4_K, …) and its bytes as stored:
//! borrowed in place from a memory-mapped file, or owned (random checkpoints, and tensors a
//! converter transform rewrites). Nothing widens a tensor on loading; a reader decodes the rows it
//! reads, as it reads them ([`Tensor::decode_rows`]). Rows are the innermost dim (GGUF's `ne0`), so
//! each row is whole blocks of its type.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::gguf::GgmlType;
use crate::mapped::Mapped;
use crate::quants::QuantError;

/// Why a tensor's bytes cannot be read as the type and shape it claims.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    #[error("it is of ggml type {0}, which this reader does not decode")]
    Unsupported(GgmlType),
    #[error("its rows of {cols} values are not whole blocks of {ty} ({block} values each)")]
    PartialBlock { ty: GgmlType, cols: usize, block: usize },
    #[error("shape {shape:?} of {ty} takes {expected} bytes, but it holds {found}")]
    Length { ty: GgmlType, shape: Vec<usize>, expected: String, found: usize },
    #[error("rows {start}..{end} lie outside its {rows} rows")]
    Rows { start: usize, end: usize, rows: usize },
    #[error("{0}")]
    Decode(#[from] QuantError),
}

/// The bytes of a tensor: owned, or a range of a memory-mapped file that the tensor keeps mapped.
/// Cloning shares them.
#[derive(Clone)]
pub struct Bytes(Repr);

#[derive(Clone)]
enum Repr {
    Owned(Arc<Vec<u8>>),
    Mapped { map: Arc<Mapped>, start: usize, end: usize },
}

impl Bytes {
    /// Bytes held in memory.
    pub fn owned(bytes: Vec<u8>) -> Bytes {
        Bytes(Repr::Owned(Arc::new(bytes)))
    }

    /// The bytes `range` of the mapped file `map`, or `None` when the range does not lie inside it.
    pub fn mapped(map: Arc<Mapped>, range: Range<usize>) -> Option<Bytes> {
        (range.start <= range.end && range.end <= map.len())
            .then(|| Bytes(Repr::Mapped { map, start: range.start, end: range.end }))
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Owned(v) => v,
            Repr::Mapped { map, start, end } => &map[*start..*end],
        }
    }

    /// Whether they are read in place from a mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Repr::Mapped { .. })
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = if self.is_mapped() { "mapped" } else { "owned" };
        write!(f, "{} bytes {how}", self.as_slice().len())
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}

/// A tensor of a checkpoint: its shape, its stored ggml type and its stored bytes, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    ty: GgmlType,
    bytes: Bytes,
}

/// How a tensor's bytes split into rows: `rows` rows of `cols` values, `row_bytes` bytes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
}

impl Tensor {
    /// An owned F32 tensor of `values` (little-endian, as GGUF stores them). The values need not
    /// fill the shape: [`Tensor::rows`] says whether they do.
    pub fn f32(shape: Vec<usize>, values: &[f32]) -> Tensor {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor { shape, ty: GgmlType::F32, bytes: Bytes::owned(bytes) }
    }

    /// A tensor of type `ty` whose bytes are `bytes`, as stored.
    pub fn stored(shape: Vec<usize>, ty: GgmlType, bytes: Bytes) -> Tensor {
        Tensor { shape, ty, bytes }
    }

    /// The stored type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// The stored bytes.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }

    /// Whether the bytes are read in place from a mapped file.
    pub fn is_mapped(&self) -> bool {
        self.bytes.is_mapped()
    }

    /// The number of values the shape holds (saturating at `usize::MAX`).
    pub fn numel(&self) -> usize {
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).unwrap_or(usize::MAX)
    }

    /// The tensor as rows of its innermost dim (a tensor of no dims is one row of one value), after
    /// checking that its type decodes, that each row is whole blocks and that the bytes are exactly
    /// the rows.
    pub fn rows(&self) -> Result<Rows, TensorError> {
        let ty = self.ty;
        let (block, block_bytes) = match (ty.decoder(), ty.block()) {
            (Some(_), Some((n, b))) => (n as usize, b as usize),
            _ => return Err(TensorError::Unsupported(ty)),
        };
        let cols = self.shape.last().copied().unwrap_or(1);
        if !cols.is_multiple_of(block) {
            return Err(TensorError::PartialBlock { ty, cols, block });
        }
        let outer = self.shape.iter().rev().skip(1).try_fold(1usize, |n, &d| n.checked_mul(d));
        let row_bytes = (cols / block).checked_mul(block_bytes);
        let total = outer.zip(row_bytes).and_then(|(r, b)| r.checked_mul(b));
        match (outer, row_bytes, total) {
            (Some(rows), Some(row_bytes), Some(t)) if t == self.bytes().len() => Ok(Rows { rows, cols, row_bytes }),
            _ => Err(TensorError::Length {
                ty,
                shape: self.shape.clone(),
                expected: total.map_or("more than usize::MAX".into(), |t| t.to_string()),
                found: self.bytes().len(),
            }),
        }
    }

    /// The stored bytes of rows `range`.
    pub fn row_bytes(&self, range: Range<usize>) -> Result<&[u8], TensorError> {
        let r = self.rows()?;
        if range.start > range.end || range.end > r.rows {
            return Err(TensorError::Rows { start: range.start, end: range.end, rows: r.rows });
        }
        Ok(&self.bytes()[range.start * r.row_bytes..range.end * r.row_bytes])
    }

    /// The values of rows `range`, dequantized exactly (ggml's dequantization) to f32.
    pub fn decode_rows(&self, range: Range<usize>) -> Result<Vec<f32>, TensorError> {
        let decode = self.ty.decoder().ok_or(TensorError::Unsupported(self.ty))?;
        Ok(decode(self.row_bytes(range)?)?)
    }

    /// Every value, dequantized exactly to f32: for small tensors (norms, biases) and tests, never
    /// for a large matrix.
    pub fn to_f32(&self) -> Result<Vec<f32>, TensorError> {
        let rows = self.rows()?.rows;
        self.decode_rows(0..rows)
    }
}

/// A checkpoint: tensors by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    pub tensors: BTreeMap<String, Tensor>,
}

impl Checkpoint {
    /// The tensor named `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name)
    }

    /// Adds (or replaces) a tensor.
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) {
        self.tensors.insert(name.into(), tensor);
    }

    /// The number of values it holds.
    pub fn numel(&self) -> usize {
        self.tensors.values().map(Tensor::numel).fold(0, usize::saturating_add)
    }

    /// The bytes its tensors are stored in, mapped or owned.
    pub fn bytes(&self) -> usize {
        self.tensors.values().map(|t| t.bytes().len()).sum()
    }

    /// The bytes of its tensors held in memory (not mapped from a file).
    pub fn owned_bytes(&self) -> usize {
        self.tensors.values().filter(|t| !t.is_mapped()).map(|t| t.bytes().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_f32_tensor_reads_back_its_values_row_by_row() {
        let t = Tensor::f32(vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(t.rows(), Ok(Rows { rows: 2, cols: 3, row_bytes: 12 }));
        assert_eq!(t.decode_rows(1..2), Ok(vec![4.0, 5.0, 6.0]));
        assert_eq!(t.to_f32().map(|v| v.len()), Ok(6));
        assert!(matches!(t.decode_rows(1..3), Err(TensorError::Rows { .. })));
    }

    #[test]
    fn bytes_that_do_not_fill_the_shape_or_split_a_block_are_refused() {
        let short = Tensor::f32(vec![3, 4], &[0.0; 11]);
        assert!(matches!(short.rows(), Err(TensorError::Length { found: 44, .. })), "{:?}", short.rows());
        let q = Tensor::stored(vec![2, 16], GgmlType::Q8_0, Bytes::owned(vec![0; 34]));
        assert!(matches!(q.rows(), Err(TensorError::PartialBlock { cols: 16, block: 32, .. })));
        let unknown = Tensor::stored(vec![4], GgmlType(9), Bytes::owned(vec![0; 36]));
        assert_eq!(unknown.rows(), Err(TensorError::Unsupported(GgmlType(9))));
    }

    #[test]
    fn a_q8_0_row_decodes_as_its_scale_times_its_quants() {
        let mut block = vec![0u8; 34];
        block[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        block[2] = 4;
        block[3] = 0xFE; // −2
        let t = Tensor::stored(vec![1, 32], GgmlType::Q8_0, Bytes::owned(block));
        let row = t.decode_rows(0..1).expect("decodes");
        assert_eq!(&row[..3], &[2.0, -1.0, 0.0]);
    }
}
