//! The engine's matvec kernels over weights in their stored types.
//!
//! A [`Matrix`] is a row-major weight matrix as its checkpoint stores it: `rows` rows of `cols`
//! values, each row whole blocks of one ggml type, borrowed in place (from a mapped file or an owned
//! buffer). [`matvec`] and [`matmat`] dequantize each block as they read it and accumulate in f32;
//! nothing holds a widened copy of a matrix. [`matmat`] reads each weight row once for up to
//! [`MAX_BATCH`] vectors of a batch.
//!
//! The rules every kernel keeps:
//!
//! - A weight is dequantized to exactly the f32 value the file format's decoder gives it
//!   ([`GgmlType::decoder`], bit-exact with ggml's `dequantize_row_*`): the same operations in the
//!   same order, never fused. Only the order in which the exact products `w·x` are summed differs
//!   between the paths (Q8_0's SIMD path factors each block's exact `d` out of its sum: see
//!   `q8_0.rs`), so every path is within `2·γ_n·Σ|w·x|` (plus `2⁻¹⁵⁰` per rounded product, for
//!   underflow) of every other (`γ_n = n·u / (1 − n·u)`, `u = 2⁻²⁴`, `n` the row length): each is
//!   within `γ_n·Σ|w·x|` of the exact sum, whatever its order. Activations stay f32 (nothing is
//!   quantized to integers).
//! - Each type family has a portable scalar path ([`Isa::Scalar`], which sums a row's products in
//!   order, from the first value to the last) and, on x86-64 with AVX2 and FMA detected at run time
//!   (once), a SIMD path ([`Isa::Avx2`]). `tests/kernels.rs` holds the scalar path to the decoder and
//!   an in-order sum exactly, and each SIMD path to the scalar one within the bound above.
//! - Types without a kernel ([`has_kernel`]) are read through the decoder one row at a time, the
//!   same reading the reference does.
//! - A matrix splits its rows over threads ([`threads`]) when it is large enough to pay for it.

mod float;
mod kquants;
mod q8_0;
#[cfg(target_arch = "x86_64")]
mod simd;
pub mod threads;

use std::sync::OnceLock;

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
        if !cols.is_multiple_of(block) {
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

    /// The stored bytes of the whole matrix.
    pub fn bytes(&self) -> &'w [u8] {
        self.bytes
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

/// The instruction sets a kernel path is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust, one product at a time, summed in order.
    Scalar,
    /// x86-64 AVX2 with FMA and F16C: 8 f32 lanes per register.
    Avx2,
}

/// The best path this machine runs, detected once.
pub fn detected() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
            return Isa::Avx2;
        }
        Isa::Scalar
    })
}

/// The most vectors of a batch one pass over a weight row serves (a larger batch is served in
/// groups of this many): each needs its own accumulator register.
pub const MAX_BATCH: usize = 8;

/// One row's dot products with `xs.len()` (1 to [`MAX_BATCH`]) vectors of the row's length, into
/// `out` (one value per vector).
type RowKernel = fn(row: &[u8], xs: &[&[f32]], out: &mut [f32]);

/// The kernels of a type family: the scalar path, and the AVX2 path where there is one.
struct Kernel {
    scalar: RowKernel,
    /// Callable only where [`detected`] is [`Isa::Avx2`] (it runs AVX2, FMA and F16C instructions).
    #[cfg(target_arch = "x86_64")]
    avx2: unsafe fn(row: &[u8], xs: &[&[f32]], out: &mut [f32]),
}

/// The table of the types that have kernels of their own.
fn kernel(ty: GgmlType) -> Option<Kernel> {
    macro_rules! k {
        ($scalar:expr, $avx2:expr) => {
            Kernel {
                scalar: $scalar,
                #[cfg(target_arch = "x86_64")]
                avx2: $avx2,
            }
        };
    }
    use float::{Bf16, F16, F32};
    Some(match ty {
        GgmlType::F32 => k!(float::row_scalar::<F32>, float::row_avx2::<F32>),
        GgmlType::F16 => k!(float::row_scalar::<F16>, float::row_avx2::<F16>),
        GgmlType::BF16 => k!(float::row_scalar::<Bf16>, float::row_avx2::<Bf16>),
        GgmlType::Q8_0 => k!(q8_0::row_scalar, q8_0::row_avx2),
        GgmlType::Q4_K => k!(kquants::q4_k_scalar, kquants::q4_k_avx2),
        GgmlType::Q5_K => k!(kquants::q5_k_scalar, kquants::q5_k_avx2),
        GgmlType::Q6_K => k!(kquants::q6_k_scalar, kquants::q6_k_avx2),
        _ => return None,
    })
}

/// Whether `ty` has kernels of its own (the others are read through the decoder row by row).
pub fn has_kernel(ty: GgmlType) -> bool {
    kernel(ty).is_some()
}

/// `out[r] = Σ_c m[r][c]·x[c]` for every row, accumulated in f32, the rows split over up to
/// `threads` threads. `x` holds `m.cols()` values and `out` `m.rows()`.
pub fn matvec(m: &Matrix, x: &[f32], out: &mut [f32], threads: usize) {
    matmat(m, x, 1, out, threads)
}

/// `outs[b][r] = Σ_c m[r][c]·xs[b][c]` for each of `batch` vectors, `xs` being `batch × cols` and
/// `outs` `batch × rows`, row-major: each weight row is read once for each [`MAX_BATCH`] vectors.
pub fn matmat(m: &Matrix, xs: &[f32], batch: usize, outs: &mut [f32], threads: usize) {
    matmat_on(detected(), m, xs, batch, outs, threads)
}

/// [`matmat`] on the path `isa` (for tests and benchmarks): [`Isa::Avx2`] where it is not
/// [`detected`] runs the scalar path.
pub fn matmat_on(isa: Isa, m: &Matrix, xs: &[f32], batch: usize, outs: &mut [f32], threads: usize) {
    matmat_with(isa, threads::DEFAULT, m, xs, batch, outs, threads)
}

/// [`matmat_on`] with the rows split over threads by `split` (for the benchmark that chose
/// [`threads::DEFAULT`]).
pub fn matmat_with(
    isa: Isa,
    split: threads::Strategy,
    m: &Matrix,
    xs: &[f32],
    batch: usize,
    outs: &mut [f32],
    threads: usize,
) {
    assert_eq!(xs.len(), batch * m.cols, "xs must be batch × cols");
    assert_eq!(outs.len(), batch * m.rows, "outs must be batch × rows");
    if batch == 0 || m.rows == 0 {
        return;
    }
    let isa = if isa == Isa::Avx2 && detected() != Isa::Avx2 { Isa::Scalar } else { isa };
    let xs: Vec<&[f32]> = if m.cols == 0 { vec![&[]; batch] } else { xs.chunks_exact(m.cols).collect() };
    let mut outs: Vec<&mut [f32]> = outs.chunks_exact_mut(m.rows).collect();
    threads::over_rows_with(split, m, &xs, &mut outs, threads, &|part, xs, outs| rows(isa, part, xs, outs));
}

/// `outs[b][r] = m.row(r) · xs[b]` for every row of `m` (a part of a matrix) on this thread.
fn rows(isa: Isa, m: &Matrix, xs: &[&[f32]], outs: &mut [&mut [f32]]) {
    let Some(k) = kernel(m.ty) else {
        return decoded_rows(m, xs, outs);
    };
    let mut out = [0f32; MAX_BATCH];
    for (group, xs) in xs.chunks(MAX_BATCH).enumerate() {
        let outs = &mut outs[group * MAX_BATCH..][..xs.len()];
        let out = &mut out[..xs.len()];
        for r in 0..m.rows {
            let row = m.row(r);
            match isa {
                Isa::Scalar => (k.scalar)(row, xs, out),
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `matmat_on` turns `Isa::Avx2` into `Isa::Scalar` unless `detected()` found
                // AVX2, FMA and F16C on this machine, the instructions `avx2` runs.
                Isa::Avx2 => unsafe { (k.avx2)(row, xs, out) },
                #[cfg(not(target_arch = "x86_64"))]
                Isa::Avx2 => (k.scalar)(row, xs, out),
            }
            for (o, v) in outs.iter_mut().zip(out.iter()) {
                o[r] = *v;
            }
        }
    }
}

/// [`rows`] for a type without kernels: each row decoded whole, then dotted in order.
fn decoded_rows(m: &Matrix, xs: &[&[f32]], outs: &mut [&mut [f32]]) {
    let mut row = vec![0f32; m.cols];
    for r in 0..m.rows {
        m.dequantize_row(r, &mut row);
        for (x, o) in xs.iter().zip(outs.iter_mut()) {
            o[r] = row.iter().zip(x.iter()).map(|(w, x)| w * x).sum();
        }
    }
}
