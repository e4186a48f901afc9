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
//!   between the scalar and the SIMD paths (Q8_0's SIMD path factors each block's exact `d` out of
//!   its sum: see `q8_0.rs`), so every path is within `2·γ_n·Σ|w·x|` (plus `2⁻¹⁵⁰` per rounded
//!   product, for underflow) of every other (`γ_n = n·u / (1 − n·u)`, `u = 2⁻²⁴`, `n` the row
//!   length): each is within `γ_n·Σ|w·x|` of the exact sum, whatever its order. Activations stay f32
//!   (nothing is quantized to integers), except where a matrix is to read its input quantized to
//!   Q8_K ([`Matrix::with_inputs`]): then [`q8k`] computes the value its rule defines, on every
//!   path the same operations, bit for bit.
//! - **A vector's value does not depend on its batch.** On each path a vector's products are summed
//!   in one order, however many vectors share the pass over a row and however the rows are grouped,
//!   paired or split over threads: [`matmat`]'s output for a vector is [`matvec`]'s, bit for bit. So
//!   a row of a batched step is the single step's row (the batched check relies on it), and
//!   [`Isa::Avx512`], the same operations with more registers, is [`Isa::Avx2`] bit for bit.
//! - Each type family has a portable scalar path ([`Isa::Scalar`], which sums a row's products in
//!   order, from the first value to the last) and, on x86-64 with AVX2 and FMA detected at run time
//!   (once), a SIMD path ([`Isa::Avx2`], compiled a second time as [`Isa::Avx512`] where AVX-512F
//!   and VL are there too). `tests/kernels.rs` holds the scalar path to the decoder and an in-order
//!   sum exactly, each SIMD path to the scalar one within the bound above, a batch to its vectors
//!   one at a time and the two SIMD compilations to each other bit for bit.
//! - Types without a kernel ([`has_kernel`]) are read through the decoder one row at a time, the
//!   same reading the reference does.
//! - A matrix splits its rows over threads ([`threads`]) when it is large enough to pay for it.
//!
//! [`activation`] holds the engine's other vectorized code: its sigmoid and SiLU of f32 values.

pub mod activation;
mod ahead;
mod float;
#[cfg(target_arch = "x86_64")]
mod float512;
mod kquants;
pub mod lines;
#[cfg(any(test, feature = "planted"))]
mod patched;
mod q8_0;
pub mod q8k;
#[cfg(target_arch = "x86_64")]
mod simd;
pub mod threads;

use std::sync::OnceLock;

#[cfg(not(target_arch = "x86_64"))]
use float::Element as FloatElement;
/// A float type with kernels on every path this target compiles.
#[cfg(target_arch = "x86_64")]
use float512::Element512 as FloatElement;

use formats::gguf::GgmlType;
use program::numerics::KquantInputs;

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
    /// Whether a matvec reads its input quantized to Q8_K ([`Matrix::with_inputs`]).
    q8k: bool,
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
        Ok(Matrix { ty, bytes, rows, cols, row_bytes, q8k: false })
    }

    /// This matrix read as `inputs` says a k-quant matrix reads its input: quantized to Q8_K
    /// ([`KquantInputs::Q8K`]) when it is stored as Q4_K, Q5_K or Q6_K ([`q8k::applies`]), as it is
    /// otherwise.
    pub fn with_inputs(self, inputs: KquantInputs) -> Matrix<'w> {
        Matrix { q8k: inputs == KquantInputs::Q8K && q8k::applies(self.ty), ..self }
    }

    /// Whether a matvec over this matrix reads its input quantized to Q8_K.
    pub fn quantizes_inputs(&self) -> bool {
        self.q8k
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
    pub(crate) fn rows_range(&self, range: std::ops::Range<usize>) -> Matrix<'w> {
        let bytes = &self.bytes[range.start * self.row_bytes..range.end * self.row_bytes];
        Matrix { bytes, rows: range.len(), ..*self }
    }

    /// Row `r`'s values, dequantized exactly into `out` (`cols` values).
    pub(crate) fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        if self.ty == GgmlType::F32 {
            // An F32 row's values are its little-endian words: read into `out`, nothing allocated.
            for (o, b) in out.iter_mut().zip(self.row(r).as_chunks::<4>().0) {
                *o = f32::from_le_bytes(*b);
            }
            return;
        }
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
    /// x86-64 AVX2 with FMA and F16C: 8 f32 lanes per register, 16 registers.
    Avx2,
    /// [`Isa::Avx2`]'s operations compiled with AVX-512F and VL enabled too: 32 registers hold the
    /// accumulators of more vectors per pass over a row; and the float types' two-row kernel in
    /// 512-bit registers, two chains to a register (`float512.rs`). Its values are [`Isa::Avx2`]'s,
    /// bit for bit (`tests/kernels.rs`).
    Avx512,
}

impl Isa {
    /// The path this machine runs for `self`: a SIMD path it lacks falls back to the widest it has.
    fn available(self) -> Isa {
        match (self, detected()) {
            (Isa::Avx512, Isa::Avx2) => Isa::Avx2,
            (Isa::Avx512 | Isa::Avx2, Isa::Scalar) => Isa::Scalar,
            (isa, _) => isa,
        }
    }
}

/// The best path this machine runs, detected once.
pub fn detected() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") {
                return Isa::Avx512;
            }
            return Isa::Avx2;
        }
        Isa::Scalar
    })
}

/// The most vectors one pass over a weight row may serve (a larger batch is served in several).
pub const MAX_BATCH: usize = 8;

/// The bytes of weight rows a thread reads from memory once and then passes over once per pass of
/// a batch (from its cache: 128 KiB sits within a core's L2 here, with room for the vectors).
const GROUP_BYTES: usize = 128 << 10;

/// One row's dot products with `xs.len()` (1 to [`MAX_BATCH`]) vectors of the row's length, into
/// `out` (one value per vector).
type RowKernel = fn(row: &[u8], xs: &[&[f32]], out: &mut [f32]);

/// The kernels of a type family: the scalar path, and the SIMD paths where there are some.
struct Kernel {
    scalar: RowKernel,
    /// Callable only where [`detected`] is [`Isa::Avx2`] or [`Isa::Avx512`] (it runs AVX2, FMA and
    /// F16C instructions).
    #[cfg(target_arch = "x86_64")]
    avx2: unsafe fn(row: &[u8], xs: &[&[f32]], out: &mut [f32]),
    /// Callable only where [`detected`] is [`Isa::Avx512`] (it may also run AVX-512F and VL ones).
    #[cfg(target_arch = "x86_64")]
    avx512: unsafe fn(row: &[u8], xs: &[&[f32]], out: &mut [f32]),
    /// The most vectors a pass of [`Kernel::avx2`] and of [`Kernel::avx512`] keeps in registers
    /// (measured: `examples/bench_kernels.rs`). A larger pass computes the same values, spilling.
    most: (usize, usize),
    /// Where there is one, the kernel of two rows at once on each SIMD path (each vector loaded once
    /// for both rows; each row's values those of the one-row kernel), and the most vectors of its
    /// passes.
    #[cfg(target_arch = "x86_64")]
    pair: Option<(PairKernel, PairKernel, (usize, usize))>,
}

/// Two rows' dot products with a pass's vectors, into `outs[0]` and `outs[1]`, asking along the way
/// for the lines of its last argument ([`ahead::Spread`]). Callable only where [`detected`] found
/// its path's instruction sets.
#[cfg(target_arch = "x86_64")]
type PairKernel = unsafe fn(rows: [&[u8]; 2], xs: &[&[f32]], outs: [&mut [f32]; 2], ahead: &[u8]);

impl Kernel {
    /// The most vectors a pass on `isa` serves.
    fn most(&self, isa: Isa) -> usize {
        match isa {
            Isa::Scalar => MAX_BATCH,
            Isa::Avx2 => self.most.0,
            Isa::Avx512 => self.most.1,
        }
    }
}

/// The table of the types that have kernels of their own.
fn kernel(ty: GgmlType) -> Option<Kernel> {
    macro_rules! k {
        ($scalar:expr, $avx2:expr, $avx512:expr, $most:expr $(, pair: $pair:expr)?) => {
            Kernel {
                scalar: $scalar,
                #[cfg(target_arch = "x86_64")]
                avx2: $avx2,
                #[cfg(target_arch = "x86_64")]
                avx512: $avx512,
                most: $most,
                #[cfg(target_arch = "x86_64")]
                pair: None $(.or(Some($pair)))?,
            }
        };
    }
    /// A float type's kernels: a row at a time, and two rows at a time for a batch.
    fn float_kernel<E: FloatElement>() -> Kernel {
        k!(
            float::row_scalar::<E>,
            float::row_avx2::<E>,
            float::row_avx512::<E>,
            (3, 7),
            pair: (float::pair_avx2::<E>, float512::pair_avx512::<E>, (1, float512::MOST))
        )
    }
    Some(match ty {
        GgmlType::F32 => float_kernel::<float::F32>(),
        GgmlType::F16 => float_kernel::<float::F16>(),
        GgmlType::BF16 => float_kernel::<float::Bf16>(),
        GgmlType::Q8_0 => k!(q8_0::row_scalar, q8_0::row_avx2, q8_0::row_avx512, (2, 5)),
        GgmlType::Q4_K => k!(kquants::q4_k_scalar, kquants::q4_k_avx2, kquants::q4_k_avx512, (2, 5)),
        GgmlType::Q5_K => k!(kquants::q5_k_scalar, kquants::q5_k_avx2, kquants::q5_k_avx512, (2, 5)),
        GgmlType::Q6_K => k!(kquants::q6_k_scalar, kquants::q6_k_avx2, kquants::q6_k_avx512, (2, 5)),
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

/// [`matmat`] on the path `isa` (for tests and benchmarks): a SIMD path this machine lacks runs the
/// widest it has ([`detected`]).
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
    // A planted kernel bug, asked for here on the calling thread (the rows may go to the pool's),
    // runs the real kernels on a copy patched to compute what the bug would (`patched.rs`).
    #[cfg(any(test, feature = "planted"))]
    if let Some(p) = patched::Patched::of(m, xs) {
        return matmat_checked(isa, split, &p.matrix(m), p.xs(xs), batch, outs, threads);
    }
    matmat_checked(isa, split, m, xs, batch, outs, threads)
}

/// [`matmat_with`] once its lengths are checked and its batch and rows are not empty.
fn matmat_checked(
    isa: Isa,
    split: threads::Strategy,
    m: &Matrix,
    xs: &[f32],
    batch: usize,
    outs: &mut [f32],
    threads: usize,
) {
    let isa = isa.available();
    let xs: Vec<&[f32]> = if m.cols == 0 { vec![&[]; batch] } else { xs.chunks_exact(m.cols).collect() };
    let mut outs: Vec<&mut [f32]> = outs.chunks_exact_mut(m.rows).collect();
    #[cfg(any(test, feature = "planted"))]
    let m = &Matrix { q8k: m.q8k && !planted::is(planted::Bug::EngineQ8kIgnored), ..*m };
    if m.q8k {
        let quantized: Vec<q8k::Q8k> = xs.iter().map(|x| q8k::Q8k::quantize(x)).collect();
        let part = |part: &Matrix, _: &[&[f32]], outs: &mut [&mut [f32]]| q8k::rows(isa, part, &quantized, outs);
        return threads::over_rows_with(split, m, &xs, &mut outs, threads, &part);
    }
    threads::over_rows_with(split, m, &xs, &mut outs, threads, &|part, xs, outs| rows(isa, part, xs, outs));
}

/// `outs[b][r] = m.row(r) · xs[b]` for every row of `m` (a part of a matrix) on this thread.
///
/// The batch is split into passes of as many vectors as the path keeps in registers, and the rows
/// into groups of [`GROUP_BYTES`]: each group is read from memory once and from cache by every
/// pass, and for a batch of more than one vector the next group is asked for while the passes run
/// over this one ([`ahead`]); within a group, rows go two at a time where the type has a pair
/// kernel.
/// None of these splits changes a value (a vector's sum has one order: `simd.rs`).
fn rows(isa: Isa, m: &Matrix, xs: &[&[f32]], outs: &mut [&mut [f32]]) {
    let Some(k) = kernel(m.ty) else {
        return decoded_rows(m, xs, outs);
    };
    let one = |row: &[u8], xs: &[&[f32]], out: &mut [f32]| match isa {
        Isa::Scalar => (k.scalar)(row, xs, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `matmat_with` keeps `Isa::Avx2` only where `detected()` found AVX2, FMA and F16C
        // on this machine, the instructions `avx2` runs (`Isa::available`).
        Isa::Avx2 => unsafe { (k.avx2)(row, xs, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `matmat_with` keeps `Isa::Avx512` only where `detected()` also found AVX-512F and
        // VL, the instructions `avx512` may run besides `avx2`'s.
        Isa::Avx512 => unsafe { (k.avx512)(row, xs, out) },
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::Avx512 => (k.scalar)(row, xs, out),
    };
    #[cfg(target_arch = "x86_64")]
    let pair = k.pair.filter(|_| xs.len() > 1).and_then(|(avx2, avx512, most)| match isa {
        Isa::Scalar => None,
        Isa::Avx2 => Some((avx2, most.0)),
        Isa::Avx512 => Some((avx512, most.1)),
    });
    #[cfg(not(target_arch = "x86_64"))]
    let pair: Option<((), usize)> = None;
    let passes = even_parts(xs.len(), pair.map_or(k.most(isa), |(_, most)| most));
    let group = (GROUP_BYTES / m.row_bytes.max(1)).max(2) / 2 * 2;
    let (mut a, mut b) = ([0f32; MAX_BATCH], [0f32; MAX_BATCH]);
    let npasses = passes.clone().count();
    let calls_per_pass = |rows: usize| if pair.is_some() { rows.div_ceil(2) } else { rows };
    for first in (0..m.rows).step_by(group) {
        let end = (first + group).min(m.rows);
        // The next group, asked for while a batch's passes run over this one (a single vector's
        // one pass streams its rows, which the hardware's own prefetcher serves better).
        let next = &m.bytes[end * m.row_bytes..(end + group).min(m.rows) * m.row_bytes];
        let mut ahead = ahead::Ahead::new(if xs.len() > 1 { next } else { &[] }, calls_per_pass(end - first) * npasses);
        for pass in passes.clone() {
            let (xs, outs) = (&xs[pass.clone()], &mut outs[pass]);
            let (a, b) = (&mut a[..xs.len()], &mut b[..xs.len()]);
            let mut r = first;
            while r < end {
                #[cfg(target_arch = "x86_64")]
                if let Some((pair, _)) = pair
                    && r + 1 < end
                {
                    // SAFETY: `matmat_with` keeps a SIMD path only where `detected()` found its
                    // instruction sets on this machine (`Isa::available`), which `pair` runs.
                    unsafe { pair([m.row(r), m.row(r + 1)], xs, [&mut *a, &mut *b], ahead.share()) };
                    for ((o, va), vb) in outs.iter_mut().zip(a.iter()).zip(b.iter()) {
                        (o[r], o[r + 1]) = (*va, *vb);
                    }
                    r += 2;
                    continue;
                }
                ahead::ask_all(ahead.share());
                one(m.row(r), xs, a);
                for (o, v) in outs.iter_mut().zip(a.iter()) {
                    o[r] = *v;
                }
                r += 1;
            }
        }
    }
}

/// `0..n` cut into as few parts of at most `most` (1 to [`MAX_BATCH`]) as may be, their sizes as
/// even as may be (an iterator: a matvec allocates nothing for it).
fn even_parts(n: usize, most: usize) -> impl Iterator<Item = std::ops::Range<usize>> + Clone {
    let parts = n.div_ceil(most.clamp(1, MAX_BATCH));
    // Part `p` ends at `⌊n·(p+1)/parts⌋`: sizes differ by at most one, each 1 to `most`.
    (0..parts).map(move |p| n * p / parts..n * (p + 1) / parts)
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

#[cfg(test)]
mod tests {
    //! The planted kernel bugs (`patched.rs`) change what the engine's matvecs compute, on every
    //! path, on matrices whose every block field differs (`model::random::random_matrix`), and
    //! leave alone the rows the check's own runs read.

    use super::*;
    use model::random::random_matrix;
    use planted::{self, Bug};

    /// The paths a test runs (a SIMD path this machine lacks runs the widest it has).
    const PATHS: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// `n` values in [−1, 1), seeded.
    fn vector(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// `m · xs` (`batch` vectors) on `isa` over `threads` threads, with `bug` planted if any.
    fn product(isa: Isa, m: &Matrix, xs: &[f32], batch: usize, threads: usize, bug: Option<Bug>) -> Vec<f32> {
        let mut out = vec![0f32; batch * m.rows()];
        let mut run = || matmat_on(isa, m, xs, batch, &mut out, threads);
        match bug {
            Some(bug) => planted::with(bug, run),
            None => run(),
        }
        out
    }

    /// The block bugs and the types whose kernels each is planted in.
    const BLOCK_BUGS: [(Bug, GgmlType); 6] = [
        (Bug::EngineQ8_0NeighbourScale, GgmlType::Q8_0),
        (Bug::EngineQ4KNeighbourScale, GgmlType::Q4_K),
        (Bug::EngineQ5KNeighbourScale, GgmlType::Q5_K),
        (Bug::EngineQ6KNeighbourScale, GgmlType::Q6_K),
        (Bug::EngineKquantMinScaledByD, GgmlType::Q4_K),
        (Bug::EngineKquantMinScaledByD, GgmlType::Q5_K),
    ];

    #[test]
    fn each_planted_block_bug_changes_every_row_its_kernels_compute_and_no_other_types() {
        let (rows, blocks) = (5, 4);
        for (bug, _) in BLOCK_BUGS {
            for other in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::F16] {
                let cols = blocks * other.block().expect("a block").0 as usize;
                let bytes = random_matrix(other, rows, cols, 11).expect("whole blocks");
                let x = vector(cols, 3);
                // The f32 kernels and, for the k-quants, the Q8_K-input kernels.
                for inputs in KquantInputs::ALL {
                    let m = Matrix::new(other, &bytes, rows, cols).expect("a matrix").with_inputs(inputs);
                    for isa in PATHS {
                        let clean = product(isa, &m, &x, 1, 1, None);
                        let planted = product(isa, &m, &x, 1, 1, Some(bug));
                        let changed = clean.iter().zip(&planted).filter(|(a, b)| a != b).count();
                        let want = if BLOCK_BUGS.contains(&(bug, other)) { rows } else { 0 };
                        assert_eq!(changed, want, "{bug:?} on {other} ({inputs:?}, {isa:?}): {clean:?} {planted:?}");
                    }
                }
                // The rows the check's runs read are the clean ones.
                let m = Matrix::new(other, &bytes, rows, cols).expect("a matrix");
                let (mut clean, mut planted) = (vec![0f32; cols], vec![0f32; cols]);
                m.dequantize_row(1, &mut clean);
                planted::with(bug, || m.dequantize_row(1, &mut planted));
                assert_eq!(clean, planted, "{bug:?} on {other}: a row dequantized");
            }
        }
    }

    #[test]
    fn a_planted_neighbour_scale_is_the_kernel_on_blocks_given_the_previous_blocks_fields() {
        // Each block given its previous block's `d` (block 0 the row's last block's), here by hand:
        // the planted Q8_0 kernel is the clean one on those blocks, bit for bit, and so are Q4_K's
        // with `d` and `dmin`, and Q4_K's minimum scaled by `d` with `dmin := d`.
        let (rows, blocks) = (3, 5);
        // (bug, type, block bytes, a block's patch from its own bytes and its previous block's)
        type Patch = fn(&[u8], &[u8], &mut [u8]);
        let cases: [(Bug, GgmlType, usize, Patch); 3] = [
            (Bug::EngineQ8_0NeighbourScale, GgmlType::Q8_0, 34, |_, prev, b| b[..2].copy_from_slice(&prev[..2])),
            (Bug::EngineQ4KNeighbourScale, GgmlType::Q4_K, 144, |_, prev, b| b[..4].copy_from_slice(&prev[..4])),
            (Bug::EngineKquantMinScaledByD, GgmlType::Q4_K, 144, |own, _, b| b[2..4].copy_from_slice(&own[..2])),
        ];
        for (bug, ty, block_bytes, patch) in cases {
            let cols = blocks * ty.block().expect("a block").0 as usize;
            let bytes = random_matrix(ty, rows, cols, 5).expect("whole blocks");
            let mut patched = bytes.clone();
            for (row, out) in
                bytes.chunks_exact(blocks * block_bytes).zip(patched.chunks_exact_mut(blocks * block_bytes))
            {
                for k in 0..blocks {
                    let (own, prev) = (&row[k * block_bytes..], &row[(k + blocks - 1) % blocks * block_bytes..]);
                    patch(own, prev, &mut out[k * block_bytes..(k + 1) * block_bytes]);
                }
            }
            let x = vector(cols, 8);
            let m = Matrix::new(ty, &bytes, rows, cols).expect("a matrix");
            let by_hand = Matrix::new(ty, &patched, rows, cols).expect("a matrix");
            for isa in PATHS {
                let planted = product(isa, &m, &x, 1, 1, Some(bug));
                assert_eq!(planted, product(isa, &by_hand, &x, 1, 1, None), "{bug:?} on {isa:?}");
            }
        }
    }

    #[test]
    fn a_planted_block_bug_is_decided_on_the_calling_thread_and_holds_on_the_pools() {
        // 64 rows of 1024 Q8_0 values (68 KiB: split over threads): the pool's threads compute the
        // planted rows as the calling thread alone does.
        let (rows, cols) = (64, 1024);
        let bytes = random_matrix(GgmlType::Q8_0, rows, cols, 2).expect("whole blocks");
        assert!(bytes.len() >= threads::PARALLEL_BYTES);
        let m = Matrix::new(GgmlType::Q8_0, &bytes, rows, cols).expect("a matrix");
        let x = vector(cols, 4);
        let bug = Some(Bug::EngineQ8_0NeighbourScale);
        let (alone, split) = (product(detected(), &m, &x, 1, 1, bug), product(detected(), &m, &x, 1, 2, bug));
        assert_eq!(alone, split);
        assert_ne!(alone, product(detected(), &m, &x, 1, 2, None));
    }

    #[test]
    fn the_planted_dropped_tail_is_each_row_without_its_last_product() {
        // On every path and batch (the float types' two-row kernels included), the clean value is
        // the planted one plus the last product, as the kernels' tail adds it: bit for bit. A row
        // of whole groups of 8 is not touched.
        let rows = 3;
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            for cols in [5, 8, 13, 16, 21] {
                let bytes = random_matrix(ty, rows, cols, 9).expect("a matrix");
                let m = Matrix::new(ty, &bytes, rows, cols).expect("a matrix");
                for batch in [1, 3] {
                    let xs = vector(batch * cols, 6);
                    for isa in PATHS {
                        let clean = product(isa, &m, &xs, batch, 1, None);
                        let planted = product(isa, &m, &xs, batch, 1, Some(Bug::EngineSimdTailDropped));
                        if cols % 8 == 0 {
                            assert_eq!(planted, clean, "{ty} {cols} on {isa:?}");
                            continue;
                        }
                        for b in 0..batch {
                            for r in 0..rows {
                                let mut w = vec![0f32; cols];
                                m.dequantize_row(r, &mut w);
                                let last = w[cols - 1] * xs[b * cols + cols - 1];
                                let (c, p) = (clean[b * rows + r], planted[b * rows + r]);
                                assert_eq!(c, p + last, "{ty} {cols} batch {batch} on {isa:?}: row {r} of {b}");
                                assert_ne!(c, p, "{ty} {cols} batch {batch} on {isa:?}: row {r} of {b}");
                            }
                        }
                    }
                }
            }
        }
    }
}
