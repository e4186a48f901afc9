//! The k-quants' kernels: Q4_K, Q5_K and Q6_K, super-blocks of 256 values.
//!
//! The layouts (ggml's `block_q4_K`, `block_q5_K`, `block_q6_K`), as facts:
//!
//! - **Q4_K**, 144 bytes: f16 `d`, f16 `dmin`, 12 bytes of packed 6-bit sub-block scales and
//!   minimums, 128 bytes of 4-bit quants. The 256 values are 4 chunks of 64; chunk `c` reads bytes
//!   `32c .. 32c + 32` of the quants, its first 32 values their low nibbles (sub-block `2c`), the
//!   next 32 their high nibbles (sub-block `2c + 1`). Value `(d · scale_s) · q − dmin · min_s`.
//! - **Q5_K**, 176 bytes: as Q4_K, with 32 bytes `qh` between the scales and the quants: value `i`
//!   of a sub-block `s` takes bit `s` of `qh[i]` as its fifth bit (bit 4 of its quant).
//! - **Q6_K**, 210 bytes: 128 bytes `ql` of low nibbles, 64 bytes `qh` of 2-bit high parts, 16 i8
//!   scales, f16 `d`. Each half `h` of 128 values is 4 quarters of 32; value `i` of quarter `j` takes
//!   the low (`j` = 0, 1) or high (`j` = 2, 3) nibble of `ql[64h + 32·(j % 2) + i]` and, as bits 4–5,
//!   bits `2j, 2j + 1` of `qh[32h + i]`, minus 32. Value `(d · scale[v / 16]) · q`.
//!
//! The 6-bit scale and minimum of a Q4_K/Q5_K sub-block `s` of 8 (12 bytes `b`): for `s < 4`, the
//! low 6 bits of `b[s]` and of `b[s + 4]`; for `s ≥ 4`, the low and the high nibble of `b[s + 4]`,
//! each with 2 more bits on top: the top 2 bits of `b[s − 4]` (scale) and of `b[s]` (minimum).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::simd::f16_at as f16c_at;
#[cfg(target_arch = "x86_64")]
use super::simd::{Acc, both_paths, by_batch, entry_points, finish, fma, pointers, zero};

/// Values per super-block.
pub(super) const QK: usize = 256;

/// The little-endian f16 at `b[at..at + 2]`, widened exactly.
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Sub-block `s`'s 6-bit scale and minimum from the 12 packed bytes `b`.
#[inline(always)]
pub(super) fn scale_min(b: &[u8], s: usize) -> (u8, u8) {
    if s < 4 {
        (b[s] & 63, b[s + 4] & 63)
    } else {
        ((b[s + 4] & 15) | ((b[s - 4] >> 6) << 4), (b[s + 4] >> 4) | ((b[s] >> 6) << 4))
    }
}

/// The f32 factors of each of a Q4_K/Q5_K block's 8 sub-blocks, `d · scale` and `dmin · min`, for
/// the block's `d` and `dmin`. (A loop, not `std::array::from_fn`, which is not inlined: called
/// once per block from a SIMD path, it was 9% of a Q4_K_M step.)
#[inline(always)]
fn factors(block: &[u8], d: f32, dmin: f32) -> [(f32, f32); 8] {
    let mut f = [(0f32, 0f32); 8];
    for (s, f) in f.iter_mut().enumerate() {
        let (sc, m) = scale_min(&block[4..16], s);
        *f = (d * f32::from(sc), dmin * f32::from(m));
    }
    f
}

/// Q4_K's bytes per block.
pub(super) const Q4_K_BYTES: usize = 144;
/// Q5_K's bytes per block.
pub(super) const Q5_K_BYTES: usize = 176;
/// Q6_K's bytes per block.
pub(super) const Q6_K_BYTES: usize = 210;

/// The scalar path of Q4_K (`fifth = false`) and Q5_K (`fifth = true`), whose blocks differ only by
/// Q5_K's `qh`: each vector's products with the row, summed in order.
fn q45_scalar<const BYTES: usize>(fifth: bool, row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    let qs_at = BYTES - 128;
    for (x, o) in xs.iter().zip(out.iter_mut()) {
        let mut acc = -0.0f32;
        for (block, x) in row.chunks_exact(BYTES).zip(x.chunks_exact(QK)) {
            let f = factors(block, f16_at(block, 0), f16_at(block, 2));
            let (qh, qs) = (&block[16..48], &block[qs_at..]);
            for (v, x) in x.iter().enumerate() {
                let (c, s, i) = (v / 64, v / 32, v % 32);
                let mut q = (qs[32 * c + i] >> (4 * (s % 2))) & 15;
                if fifth {
                    q |= ((qh[i] >> s) & 1) << 4;
                }
                let (scale, min) = f[s];
                acc += (scale * f32::from(q) - min) * x;
            }
        }
        *o = acc;
    }
}

/// Q4_K's scalar path.
pub(super) fn q4_k_scalar(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    q45_scalar::<Q4_K_BYTES>(false, row, xs, out)
}

/// Q5_K's scalar path.
pub(super) fn q5_k_scalar(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    q45_scalar::<Q5_K_BYTES>(true, row, xs, out)
}

/// Q6_K's scalar path: each vector's products with the row, summed in order.
pub(super) fn q6_k_scalar(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    for (x, o) in xs.iter().zip(out.iter_mut()) {
        let mut acc = -0.0f32;
        for (block, x) in row.chunks_exact(Q6_K_BYTES).zip(x.chunks_exact(QK)) {
            let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
            let d = f16_at(block, 208);
            for (v, x) in x.iter().enumerate() {
                let (h, j, i) = (v / 128, v % 128 / 32, v % 32);
                let low = (ql[64 * h + 32 * (j % 2) + i] >> (4 * (j / 2))) & 15;
                let high = (qh[32 * h + i] >> (2 * j)) & 3;
                let q = i32::from(low | (high << 4)) - 32;
                acc += (d * f32::from(scales[v / 16] as i8)) * (q as f32) * x;
            }
        }
        *o = acc;
    }
}

/// 8 bytes from `p`, each zero-extended to an i32 lane.
///
/// # Safety
/// AVX2 is available and `p .. p + 8` is readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn bytes8(p: *const u8) -> __m256i {
    // SAFETY: the caller's bounds and AVX2.
    unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast())) }
}

/// The 32 unsigned 6-bit quants (0 to 63) of each quarter `j` of half `h` of a Q6_K block, a
/// register of bytes per quarter: the low (`j` = 0, 1) or high (`j` = 2, 3) nibbles of `ql`, with
/// bits `2j, 2j + 1` of `qh` as bits 4–5 (masked and shifted 16 bits at a time, which the masks
/// keep within each byte). The f32 path and the Q8_K path (`q8k.rs`) both read them.
///
/// # Safety
/// AVX2 is available, `block` holds a whole Q6_K block (210 bytes) and `h < 2`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn q6_k_quarters(block: &[u8], h: usize) -> [__m256i; 4] {
    // SAFETY: the caller's AVX2; `ql` bytes `64h .. 64h + 64` (below 128) and `qh` bytes
    // `128 + 32h .. + 32` (below 192) are within the block's 210 (h < 2).
    unsafe {
        let at = |o: usize| _mm256_loadu_si256(block.as_ptr().add(o).cast());
        let (ql_a, ql_b, qh) = (at(64 * h), at(64 * h + 32), at(128 + 32 * h));
        let (nibble, two) = (_mm256_set1_epi8(15), _mm256_set1_epi8(3));
        let join = |low, high| _mm256_or_si256(low, _mm256_slli_epi16::<4>(_mm256_and_si256(high, two)));
        [
            join(_mm256_and_si256(ql_a, nibble), qh),
            join(_mm256_and_si256(ql_b, nibble), _mm256_srli_epi16::<2>(qh)),
            join(_mm256_and_si256(_mm256_srli_epi16::<4>(ql_a), nibble), _mm256_srli_epi16::<4>(qh)),
            join(_mm256_and_si256(_mm256_srli_epi16::<4>(ql_b), nibble), _mm256_srli_epi16::<6>(qh)),
        ]
    }
}

entry_points! {
    /// Q4_K's AVX2 path: per group of 8 bytes of quants, their low nibbles (8 values of sub-block
    /// `2c`) and their high nibbles (8 of sub-block `2c + 1`), each `scale · q − min` with one
    /// rounding per operation, as the decoder computes it.
    q4_k_avx2, q4_k_avx512, q4_k_pass
}

entry_points! {
    /// Q5_K's AVX2 path: Q4_K's, with each nibble's fifth bit from `qh`.
    q5_k_avx2, q5_k_avx512, q5_k_pass
}

entry_points! {
    /// Q6_K's AVX2 path: per quarter of a half, the 32 quants made in one register of bytes (nibbles
    /// and 2-bit pairs masked and shifted 16 bits at a time, which the masks keep within each byte),
    /// then each 8 of them sign-extended to i32, converted (exactly) to f32 and multiplied by their
    /// sub-block's `d · scale`, as the decoder computes it.
    q6_k_avx2, q6_k_avx512, q6_k_pass
}

#[cfg(target_arch = "x86_64")]
both_paths! {
    /// A row of Q4_K against the `B` vectors of a pass.
    pub(super) fn q4_k_pass<const B: usize>(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
        let (blocks, _) = row.as_chunks::<Q4_K_BYTES>();
        let p = pointers::<B>(xs, blocks.len() * QK);
        // SAFETY: the instruction sets are this function's.
        let mut acc: Acc<B> = unsafe { zero() };
        let nibble = _mm256_set1_epi32(15);
        for (k, block) in blocks.iter().enumerate() {
            // SAFETY: the instruction sets are this function's.
            let f = factors(block, unsafe { f16c_at(block, 0) }, unsafe { f16c_at(block, 2) });
            for c in 0..4 {
                let (lo_scale, lo_min) = (_mm256_set1_ps(f[2 * c].0), _mm256_set1_ps(f[2 * c].1));
                let (hi_scale, hi_min) = (_mm256_set1_ps(f[2 * c + 1].0), _mm256_set1_ps(f[2 * c + 1].1));
                for g in 0..4 {
                    let at = k * QK + 64 * c + 8 * g;
                    // SAFETY: the instruction sets are this function's; quant bytes
                    // `16 + 32c + 8g .. + 8` are within the block's 144 (c, g < 4), and values
                    // `at .. at + 40` (the high nibbles' are 32 on) within the block's 256 of each
                    // vector, which `pointers` checked holds 256 for each of the row's blocks.
                    unsafe {
                        let q = bytes8(block.as_ptr().add(16 + 32 * c + 8 * g));
                        let lo = _mm256_cvtepi32_ps(_mm256_and_si256(q, nibble));
                        let hi = _mm256_cvtepi32_ps(_mm256_srli_epi32::<4>(q));
                        fma(&mut acc, _mm256_sub_ps(_mm256_mul_ps(lo_scale, lo), lo_min), &p, at, g);
                        fma(&mut acc, _mm256_sub_ps(_mm256_mul_ps(hi_scale, hi), hi_min), &p, at + 32, g + 1);
                    }
                }
            }
        }
        // SAFETY: the instruction sets are this function's.
        unsafe { finish(&acc, out) };
    }

    /// A row of Q5_K against the `B` vectors of a pass.
    pub(super) fn q5_k_pass<const B: usize>(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
        let (blocks, _) = row.as_chunks::<Q5_K_BYTES>();
        let p = pointers::<B>(xs, blocks.len() * QK);
        // SAFETY: the instruction sets are this function's.
        let mut acc: Acc<B> = unsafe { zero() };
        let (nibble, one) = (_mm256_set1_epi32(15), _mm256_set1_epi32(1));
        for (k, block) in blocks.iter().enumerate() {
            // SAFETY: the instruction sets are this function's.
            let f = factors(block, unsafe { f16c_at(block, 0) }, unsafe { f16c_at(block, 2) });
            for c in 0..4 {
                let (lo_scale, lo_min) = (_mm256_set1_ps(f[2 * c].0), _mm256_set1_ps(f[2 * c].1));
                let (hi_scale, hi_min) = (_mm256_set1_ps(f[2 * c + 1].0), _mm256_set1_ps(f[2 * c + 1].1));
                let (lo_bit, hi_bit) = (_mm256_set1_epi32(2 * c as i32), _mm256_set1_epi32(2 * c as i32 + 1));
                for g in 0..4 {
                    let at = k * QK + 64 * c + 8 * g;
                    // SAFETY: the instruction sets are this function's; `qh` bytes `16 + 8g .. + 8`
                    // and quant bytes `48 + 32c + 8g .. + 8` are within the block's 176 (c, g < 4),
                    // and values `at .. at + 40` within each vector, as in Q4_K.
                    unsafe {
                        let q = bytes8(block.as_ptr().add(48 + 32 * c + 8 * g));
                        let h = bytes8(block.as_ptr().add(16 + 8 * g));
                        let lo_h = _mm256_slli_epi32::<4>(_mm256_and_si256(_mm256_srlv_epi32(h, lo_bit), one));
                        let hi_h = _mm256_slli_epi32::<4>(_mm256_and_si256(_mm256_srlv_epi32(h, hi_bit), one));
                        let lo = _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_and_si256(q, nibble), lo_h));
                        let hi = _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_srli_epi32::<4>(q), hi_h));
                        fma(&mut acc, _mm256_sub_ps(_mm256_mul_ps(lo_scale, lo), lo_min), &p, at, g);
                        fma(&mut acc, _mm256_sub_ps(_mm256_mul_ps(hi_scale, hi), hi_min), &p, at + 32, g + 1);
                    }
                }
            }
        }
        // SAFETY: the instruction sets are this function's.
        unsafe { finish(&acc, out) };
    }

    /// A row of Q6_K against the `B` vectors of a pass.
    pub(super) fn q6_k_pass<const B: usize>(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
        let (blocks, _) = row.as_chunks::<Q6_K_BYTES>();
        let p = pointers::<B>(xs, blocks.len() * QK);
        // SAFETY: the instruction sets are this function's.
        let mut acc: Acc<B> = unsafe { zero() };
        let middle = _mm256_set1_epi8(32);
        for (k, block) in blocks.iter().enumerate() {
            // SAFETY: the instruction sets are this function's.
            let d = unsafe { f16c_at(block, 208) };
            let scale: [f32; 16] = std::array::from_fn(|s| d * f32::from(block[192 + s] as i8));
            for h in 0..2 {
                // SAFETY: the instruction sets are this function's; the block is a whole Q6_K
                // block (`as_chunks`) and h < 2.
                let quarters = unsafe { q6_k_quarters(block, h) };
                for (j, quants) in quarters.into_iter().enumerate() {
                    let q = _mm256_sub_epi8(quants, middle);
                    let (lo, hi) = (_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
                    let groups = [lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)];
                    for (g, q8) in groups.into_iter().enumerate() {
                        let s = _mm256_set1_ps(scale[8 * h + 2 * j + g / 2]);
                        let w = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
                        // SAFETY: the instruction sets are this function's; values
                        // `256k + 128h + 32j + 8g .. + 8` are within the block's 256 of each
                        // vector, which `pointers` checked holds 256 for each of the row's blocks.
                        unsafe { fma(&mut acc, w, &p, k * QK + 128 * h + 32 * j + 8 * g, g) };
                    }
                }
            }
        }
        // SAFETY: the instruction sets are this function's.
        unsafe { finish(&acc, out) };
    }
}
