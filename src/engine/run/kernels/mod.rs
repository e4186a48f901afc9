//! The engine's matvec kernels over weights in their stored types.
//!
//! A [`Matrix`] is a row-major weight matrix as its checkpoint stores it: `rows` rows of `cols`
//! values, each row whole blocks of one ggml type, borrowed in place (from a mapped file or an owned
//! buffer). [`matvec`] and [`matmat`] dequantize each block as they read it and accumulate in f32;
//! nothing holds a widened copy of a matrix. [`matmat`] reads each weight row once for every vector
//! of a batch.
//!
//! This file is the kernels' interface and their scalar path, the specification the SIMD paths are
//! tested against. Types without a kernel of their own are read through the file format's decoder
//! one row at a time ([`GgmlType::decoder`]), the same reading the reference does.

use crate::formats::gguf::GgmlType;

/// Why a matrix cannot be read as the type and shape it claims.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("ggml type {0} has no decoder, so no matvec reads it")]
    Unsupported(GgmlType),
    #[error("a row of {cols} values is not whole blocks of {ty} ({block} values each)")]
    PartialBlock { ty: GgmlType, cols: usize, block: usize },
    #[error("{rows} rows of {cols} values of {ty} take {expected} bytes, but {found} are given")]
    Length { ty: GgmlType, rows: usize, cols: usize, expected: usize, found: usize },
}

/// A row-major weight matrix in its stored type, borrowed in place.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'w> {
    ty: GgmlType,
    bytes: &'w [u8],
    rows: usize,
    cols: usize,
    row_bytes: usize,
}

impl<'w> Matrix<'w> {
    /// `bytes` read as `rows` rows of `cols` values of `ty`; the type must decode, each row must be
    /// whole blocks and `bytes` exactly the rows.
    pub fn new(ty: GgmlType, bytes: &'w [u8], rows: usize, cols: usize) -> Result<Self, KernelError> {
        let (block, block_bytes) = match (ty.decoder(), ty.block()) {
            (Some(_), Some((n, b))) => (n as usize, b as usize),
            _ => return Err(KernelError::Unsupported(ty)),
        };
        if cols % block != 0 {
            return Err(KernelError::PartialBlock { ty, cols, block });
        }
        let row_bytes = cols / block * block_bytes;
        let expected = row_bytes.checked_mul(rows);
        if expected != Some(bytes.len()) {
            let expected = expected.unwrap_or(usize::MAX);
            return Err(KernelError::Length { ty, rows, cols, expected, found: bytes.len() });
        }
        Ok(Matrix { ty, bytes, rows, cols, row_bytes })
    }

    /// The stored type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The number of values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The stored bytes of row `r`.
    pub fn row(&self, r: usize) -> &'w [u8] {
        &self.bytes[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// The rows `range` as a matrix of their own (for splitting over threads).
    pub fn rows_range(&self, range: std::ops::Range<usize>) -> Matrix<'w> {
        let bytes = &self.bytes[range.start * self.row_bytes..range.end * self.row_bytes];
        Matrix { bytes, rows: range.len(), ..*self }
    }

    /// Row `r`'s values, dequantized exactly into `out` (`cols` values).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let decode = self.ty.decoder().expect("Matrix::new checked the type decodes");
        let values = decode(self.row(r)).expect("Matrix::new checked the row is whole blocks");
        out.copy_from_slice(&values);
    }
}

/// `out[r] = Σ_c m[r][c]·x[c]` for every row, accumulated in f32, the rows split over up to
/// `threads` threads. `x` holds `m.cols()` values and `out` `m.rows()`.
pub fn matvec(m: &Matrix, x: &[f32], out: &mut [f32], threads: usize) {
    matmat(m, x, 1, out, threads)
}

/// `outs[b][r] = Σ_c m[r][c]·xs[b][c]` for each of `batch` vectors, `xs` being `batch × cols` and
/// `outs` `batch × rows`, row-major: each weight row is read once for the whole batch.
pub fn matmat(m: &Matrix, xs: &[f32], batch: usize, outs: &mut [f32], _threads: usize) {
    assert_eq!(xs.len(), batch * m.cols, "xs must be batch × cols");
    assert_eq!(outs.len(), batch * m.rows, "outs must be batch × rows");
    let mut row = vec![0f32; m.cols];
    for r in 0..m.rows {
        m.dequantize_row(r, &mut row);
        for b in 0..batch {
            let x = &xs[b * m.cols..(b + 1) * m.cols];
            outs[b * m.rows + r] = row.iter().zip(x).map(|(w, x)| w * x).sum();
        }
    }
}
