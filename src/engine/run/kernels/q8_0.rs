//! Q8_0's kernels. A block (ggml's `block_q8_0`, 34 bytes) is a little-endian f16 scale `d` and
//! 32 signed 8-bit quants `q_j`; value `j` of the block is `d · q_j`, one f32 product.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::simd::{Acc, by_batch, f16_at, finish, fma, pointers, zero};

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

/// The AVX2 path: each group of 8 quants sign-extended to i32, converted (exactly) to f32 and
/// multiplied by the block's scale.
///
/// # Safety
/// AVX2, FMA and F16C are available.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn row_avx2(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    // SAFETY: the caller's instruction sets, which are `batch`'s.
    unsafe { by_batch!(batch, row, xs, out) }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn batch<const B: usize, const L: usize>(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
        let (blocks, _) = row.as_chunks::<BLOCK_BYTES>();
        let p = pointers::<B>(xs, blocks.len() * BLOCK_VALUES);
        // SAFETY: the instruction sets are this function's.
        let mut acc: Acc<B, L> = unsafe { zero() };
        for (k, block) in blocks.iter().enumerate() {
            // SAFETY: the instruction sets are this function's.
            let d = _mm256_set1_ps(unsafe { f16_at(block, 0) });
            for g in 0..4 {
                // SAFETY: the instruction sets are this function's; bytes `2 + 8g .. 10 + 8g` are
                // within the block's 34 (g < 4), and values `32k + 8g .. + 8` within each vector,
                // which `pointers` checked holds 32 for each of the row's blocks.
                unsafe {
                    let q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(block.as_ptr().add(2 + 8 * g).cast()));
                    let w = _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
                    fma(&mut acc, w, &p, k * BLOCK_VALUES + 8 * g, g);
                }
            }
        }
        // SAFETY: the instruction sets are this function's.
        unsafe { finish(&acc, out) };
    }
}
