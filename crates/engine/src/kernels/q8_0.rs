//! Q8_0's kernels. A block (ggml's `block_q8_0`, 34 bytes) is a little-endian f16 scale `d` and
//! 32 signed 8-bit quants `q_j`; value `j` of the block is `d · q_j`, one f32 product.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::simd::{Acc, both_paths, by_batch, chained, entry_points, f16_at, finish, fma, pointers, zero};

/// Bytes per block.
const BLOCK_BYTES: usize = 34;
/// Values per block.
const BLOCK_VALUES: usize = 32;

/// A block's scale, widened exactly.
fn scale(block: &[u8]) -> f32 {
    half::f16::from_le_bytes([block[0], block[1]]).to_f32()
}

/// The scalar path: each vector's products with the row, summed in order.
pub(super) fn row_scalar(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    for (x, o) in xs.iter().zip(out.iter_mut()) {
        let mut acc = -0.0f32;
        for (block, x) in row.chunks_exact(BLOCK_BYTES).zip(x.chunks_exact(BLOCK_VALUES)) {
            let d = scale(block);
            for (&q, x) in block[2..].iter().zip(x) {
                acc += d * f32::from(q as i8) * x;
            }
        }
        *o = acc;
    }
}

entry_points! {
    /// The AVX2 path: each group of 8 quants sign-extended to i32 and converted (exactly) to f32
    /// (up to 2 vectors of a pass run from registers: each one's block sum and 4 chains, the scale and
    /// the block's 4 groups).
    ///
    /// A weight `d · q` is exact in f32 (an f16 significand of 11 bits times an 8-bit integer needs at
    /// most 19 bits, and no product of an f16 and an i8 falls below f32's normal range), so
    /// `Σ (d·q)·x = d · Σ q·x` exactly, in real arithmetic: each block's `Σ q·x` is summed first and
    /// multiplied by `d` once (5 multiply-adds per 32 values instead of 4 multiplications and 4
    /// multiply-adds). That is another order of the same exact products, within the bound every path
    /// keeps (its depth, `32/8 + 3 + 2 + blocks`, is below `n`), with one more rounded product per block
    /// (`n/32` more underflows of at most 2⁻¹⁵⁰ each).
    row_avx2, row_avx512, pass
}

#[cfg(target_arch = "x86_64")]
both_paths! {
    /// A row's dot products with the `B` vectors of a pass, a block at a time.
    pub(super) fn pass<const B: usize>(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
        let (blocks, _) = row.as_chunks::<BLOCK_BYTES>();
        let p = pointers::<B>(xs, blocks.len() * BLOCK_VALUES);
        // SAFETY: the instruction sets are this function's.
        let mut acc: Acc<B> = unsafe { zero() };
        chained(blocks.len(), |k, chain| {
            let block = &blocks[k];
            // SAFETY: the instruction sets are this function's.
            let d = _mm256_set1_ps(unsafe { f16_at(block, 0) });
            // SAFETY: the instruction sets are this function's; bytes `2 + 8g .. 10 + 8g` are within
            // the block's 34 (g < 4).
            let q: [__m256; 4] = std::array::from_fn(|g| unsafe {
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(block.as_ptr().add(2 + 8 * g).cast())))
            });
            let at = k * BLOCK_VALUES;
            // SAFETY: the instruction sets are this function's.
            let mut sum: Acc<B> = unsafe { zero() };
            for (g, q) in q.iter().enumerate() {
                // SAFETY: values `at + 8g .. + 8` are within each vector, which `pointers` checked
                // holds 32 for each of the row's blocks.
                unsafe { fma(&mut sum, *q, &p, at + 8 * g, 0) };
            }
            for b in 0..B {
                acc[b][chain] = _mm256_fmadd_ps(d, sum[b][0], acc[b][chain]);
            }
        });
        // SAFETY: the instruction sets are this function's.
        unsafe { finish(&acc, out) };
    }
}
