//! The float types' kernels: F32, F16 and BF16, one value per "block", widened exactly to f32.
//!
//! F32 is its 4 little-endian bytes; F16 its 2 little-endian bytes, an IEEE half (widened by F16C's
//! `vcvtph2ps` on the SIMD path, which is exact, subnormals, infinities and NaN payloads included);
//! BF16 its 2 little-endian bytes, the top half of an f32 (widened by a 16-bit shift). A row of
//! these may be any length: the SIMD path takes 8 values at a time and the rest one by one.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::ahead::Spread;
#[cfg(target_arch = "x86_64")]
use super::simd::{Acc, both_paths, by_batch, chained, entry_points, finish, fma, fma2, pointers, zero};

/// A float type as a row stores it.
pub(super) trait Element {
    /// Bytes per value.
    const BYTES: usize;
    /// The value whose bytes start `bytes`, widened to f32.
    fn widen(bytes: &[u8]) -> f32;
    /// The 8 values whose bytes start at `p`, widened to f32.
    ///
    /// # Safety
    /// AVX2 and F16C are available and `p .. p + 8 · BYTES` is readable.
    #[cfg(target_arch = "x86_64")]
    unsafe fn widen8(p: *const u8) -> __m256;
}

/// IEEE single precision.
pub(super) struct F32;
/// IEEE half precision.
pub(super) struct F16;
/// bfloat16: an f32's sign, exponent and top 7 fraction bits.
pub(super) struct Bf16;

impl Element for F32 {
    const BYTES: usize = 4;
    fn widen(b: &[u8]) -> f32 {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen8(p: *const u8) -> __m256 {
        // SAFETY: the caller's bounds; an unaligned load.
        unsafe { _mm256_loadu_ps(p.cast()) }
    }
}

impl Element for F16 {
    const BYTES: usize = 2;
    fn widen(b: &[u8]) -> f32 {
        half::f16::from_le_bytes([b[0], b[1]]).to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen8(p: *const u8) -> __m256 {
        // SAFETY: the caller's bounds (16 bytes) and its F16C.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
}

impl Element for Bf16 {
    const BYTES: usize = 2;
    fn widen(b: &[u8]) -> f32 {
        f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen8(p: *const u8) -> __m256 {
        // SAFETY: the caller's bounds (16 bytes) and its AVX2.
        unsafe {
            let halves = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(halves))
        }
    }
}

/// The scalar path: each vector's products with the row, summed in order.
pub(super) fn row_scalar<E: Element>(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    for (x, o) in xs.iter().zip(out.iter_mut()) {
        let mut acc = -0.0f32;
        for (w, x) in row.chunks_exact(E::BYTES).zip(x.iter()) {
            acc += E::widen(w) * x;
        }
        *o = acc;
    }
}

entry_points! {
    /// The AVX2 path: a row against the vectors of one pass (up to 3 vectors run from registers: 12 chains
    /// and the weight register).
    row_avx2, row_avx512, pass [E: Element]
}

/// Two rows of the same length against the vectors of one pass on the AVX2 path: each vector's
/// values loaded once for both rows, each row's sums in the order [`row_avx2`]'s are (1 vector runs
/// from registers: 8 chains and 2 weight registers), the lines of `ahead` asked for along the way.
/// (On [`super::Isa::Avx512`] the two-row kernel is `float512.rs`'s.)
///
/// # Safety
/// AVX2, FMA and F16C are available.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn pair_avx2<E: Element>(rows: [&[u8]; 2], xs: &[&[f32]], outs: [&mut [f32]; 2], ahead: &[u8]) {
    // SAFETY: the caller's instruction sets, which are `pair`'s.
    unsafe { by_batch!(pair[E], xs.len(), (rows, xs, outs, ahead)) }
}

#[cfg(target_arch = "x86_64")]
both_paths! {
    /// A row's dot products with the `B` vectors of a pass: 8 values at a time, widened once.
    pub(super) fn pass<E: Element, const B: usize>(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
        let cols = row.len() / E::BYTES;
        let p = pointers::<B>(xs, cols);
        let whole = cols / 8 * 8;
        // SAFETY: the instruction sets are this function's.
        let mut acc: Acc<B> = unsafe { zero() };
        chained(whole / 8, |i, chain| {
            let at = 8 * i;
            // SAFETY: the instruction sets are this function's; `at` is a multiple of 8 below
            // `whole`, so `at + 8 <= cols`: within the row (bytes `at · BYTES ..` of its
            // `cols · BYTES`) and within each vector, which `pointers` checked holds `cols` values.
            unsafe { fma(&mut acc, E::widen8(row.as_ptr().add(at * E::BYTES)), &p, at, chain) };
        });
        // SAFETY: the instruction sets are this function's.
        unsafe { finish(&acc, out) };
        for (x, o) in xs.iter().zip(out.iter_mut()) {
            for c in whole..cols {
                *o += E::widen(&row[c * E::BYTES..]) * x[c];
            }
        }
    }
}

/// Two rows' dot products with the `B` vectors of a pass on the AVX2 path, each as [`avx2::pass`]
/// computes it, the lines of `ahead` asked for along the way ([`Spread`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair<E: Element, const B: usize>(rows: [&[u8]; 2], xs: &[&[f32]], outs: [&mut [f32]; 2], ahead: &[u8]) {
    assert_eq!(rows[0].len(), rows[1].len(), "a pair of rows of one length");
    let cols = rows[0].len() / E::BYTES;
    let p = pointers::<B>(xs, cols);
    let whole = cols / 8 * 8;
    // SAFETY: the instruction sets are this function's.
    let mut acc: [Acc<B>; 2] = unsafe { [zero(), zero()] };
    let mut spread = Spread::new(ahead, whole / 8);
    chained(whole / 8, |i, chain| {
        spread.step();
        let at = 8 * i;
        // SAFETY: the instruction sets are this function's; `at + 8 <= cols`, within both rows
        // (of one length) and each vector, as in `pass`.
        unsafe {
            let w = rows.map(|row| E::widen8(row.as_ptr().add(at * E::BYTES)));
            fma2(&mut acc, w, &p, at, chain);
        }
    });
    spread.finish();
    for ((acc, row), out) in acc.iter().zip(rows).zip(outs) {
        // SAFETY: the instruction sets are this function's.
        unsafe { finish(acc, out) };
        for (x, o) in xs.iter().zip(out.iter_mut()) {
            for c in whole..cols {
                *o += E::widen(&row[c * E::BYTES..]) * x[c];
            }
        }
    }
}
