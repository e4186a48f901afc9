//! K-quant rows against inputs quantized to Q8_K: the engine's integer dot products, where the
//! program's numerics say so ([`KquantInputs::Q8K`]), for matrices stored as Q4_K, Q5_K or Q6_K.
//!
//! A vector is quantized once per matvec ([`Q8k::quantize`], the rule `KquantInputs::Q8K` states:
//! per block of 256, `q = round_half_even(x · (127 / a))`, `dₓ = a / 127`, `a = max |x|`, each
//! in f32). Each row block is then dotted with the vector's block in integers, exactly, and the
//! integer sums are scaled in f32:
//!
//! - Q4_K and Q5_K: `v = (d · dₓ) · f32(Σₛ scaleₛ · Σᵢ qᵢ · xqᵢ) − (dmin · dₓ) · f32(Σₛ minₛ · Σᵢ xqᵢ)`;
//! - Q6_K: `v = (d · dₓ) · f32(Σₛ scaleₛ · Σᵢ (qᵢ − 32) · xqᵢ)`;
//!
//! each product and the difference rounded to f32 once, in that order (no fused multiply-add), and
//! a row's value is its blocks' `v` added in order from `−0`. In real arithmetic `v` is
//! `Σᵢ wᵢ · dₓ · xqᵢ`, `wᵢ` the weight's exact value. Every path computes these very operations
//! (the integer sums are exact whatever their order), so the scalar and AVX2 paths agree bit for
//! bit and a vector's value does not depend on its batch. The integer sums cannot overflow an i32:
//! Q4_K's are at most `8 · 63 · 32 · 15 · 127` (3.1·10⁷), Q5_K's `8 · 63 · 32 · 31 · 127`
//! (6.3·10⁷), Q6_K's `16 · 128 · 16 · 63 · 127` (2.7·10⁸).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::kquants::q6_k_quarters;
use super::kquants::{Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, QK, f16_at};
#[cfg(target_arch = "x86_64")]
use super::simd::f16_at as f16c_at;
use super::{Isa, Matrix};
use formats::gguf::GgmlType;

/// Whether a matrix of `ty` reads its input quantized to Q8_K under [`KquantInputs::Q8K`].
///
/// [`KquantInputs::Q8K`]: program::numerics::KquantInputs::Q8K
pub fn applies(ty: GgmlType) -> bool {
    program::numerics::KquantInputs::Q8K.quantizes(ty)
}

/// A vector quantized to Q8_K blocks: each block's `dₓ`, its 256 integers, and their sums by 16.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Q8k {
    pub d: Vec<f32>,
    pub q: Vec<i8>,
    /// Each 16 integers' sum (at most `16 · 127` in size).
    pub sums: Vec<i16>,
}

impl Q8k {
    /// `x` (whole blocks of 256 values) quantized by the rule of the module documentation; a block
    /// with a value that is not finite has `dₓ` NaN (and its integers 0), so that every row dotted
    /// with it is NaN.
    pub fn quantize(x: &[f32]) -> Q8k {
        let blocks = x.len() / QK;
        let mut v = Q8k { d: Vec::with_capacity(blocks), q: vec![0; blocks * QK], sums: vec![0; blocks * QK / 16] };
        for (k, block) in x.chunks_exact(QK).enumerate() {
            let a = block.iter().fold(0f32, |a, x| a.max(x.abs()));
            let q = &mut v.q[k * QK..(k + 1) * QK];
            if !block.iter().all(|x| x.is_finite()) {
                v.d.push(f32::NAN);
                continue;
            }
            if a == 0.0 {
                v.d.push(0.0);
                continue;
            }
            // |x · (127 / a)| ≤ 127 · (1 + 2⁻²⁴)², which rounds to at most 127.
            let scale = 127.0 / a;
            for (q, x) in q.iter_mut().zip(block) {
                *q = (x * scale).round_ties_even() as i8;
                #[cfg(any(test, feature = "planted"))]
                if planted::is(planted::Bug::EngineQ8kTowardZero) {
                    *q = (x * scale).trunc() as i8;
                }
            }
            v.d.push(a / 127.0);
            for (sum, q) in v.sums[k * QK / 16..].iter_mut().zip(q.chunks_exact(16)) {
                *sum = q.iter().map(|&q| i16::from(q)).sum();
            }
        }
        v
    }
}

/// `outs[b][r] = m.row(r) · xs[b]` for every row of `m` (a part of a Q4_K, Q5_K or Q6_K matrix),
/// on `isa`.
pub(super) fn rows(isa: Isa, m: &Matrix, xs: &[Q8k], outs: &mut [&mut [f32]]) {
    let simd = matches!(isa, Isa::Avx2 | Isa::Avx512) && cfg!(target_arch = "x86_64");
    match (m.ty(), simd) {
        (GgmlType::Q4_K, false) => {
            each_block(m, Q4_K_BYTES, xs, outs, |b, d, q, s| q4_k_block(b, d, q, s, f16_at, q4_k_sum))
        }
        (GgmlType::Q5_K, false) => {
            each_block(m, Q5_K_BYTES, xs, outs, |b, d, q, s| q4_k_block(b, d, q, s, f16_at, q5_k_sum))
        }
        (_, false) => each_block(m, Q6_K_BYTES, xs, outs, |b, d, q, s| q6_k_block(b, d, q, s, q6_k_sum)),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `matmat_with` keeps a SIMD path only where `detected()` found AVX2, FMA and F16C
        // on this machine (`Isa::available`), the instructions these functions run.
        (GgmlType::Q4_K, true) => unsafe { q4_k_rows_avx2(m, xs, outs) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as for Q4_K.
        (GgmlType::Q5_K, true) => unsafe { q5_k_rows_avx2(m, xs, outs) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as for Q4_K.
        (_, true) => unsafe { q6_k_rows_avx2(m, xs, outs) },
        #[cfg(not(target_arch = "x86_64"))]
        (_, true) => unreachable!("no SIMD path off x86-64"),
    }
}

/// [`rows`] of Q4_K on AVX2.
///
/// # Safety
/// AVX2 and F16C are available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q4_k_rows_avx2(m: &Matrix, xs: &[Q8k], outs: &mut [&mut [f32]]) {
    // SAFETY: this function's F16C; `at + 2` is within the block (its f16 factors at 0 and 2).
    let f16 = |b: &[u8], at: usize| unsafe { f16c_at(b, at) };
    each_block(m, Q4_K_BYTES, xs, outs, |b, d, q, s| {
        // SAFETY: this function's AVX2; `each_block` passes whole blocks of 144 bytes and 256
        // integers.
        q4_k_block(b, d, q, s, f16, |b, q, sc| unsafe { q4_k_sum_avx2(b, q, sc) })
    })
}

/// [`rows`] of Q5_K on AVX2.
///
/// # Safety
/// AVX2 and F16C are available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q5_k_rows_avx2(m: &Matrix, xs: &[Q8k], outs: &mut [&mut [f32]]) {
    // SAFETY: this function's F16C; `at + 2` is within the block (its f16 factors at 0 and 2).
    let f16 = |b: &[u8], at: usize| unsafe { f16c_at(b, at) };
    each_block(m, Q5_K_BYTES, xs, outs, |b, d, q, s| {
        // SAFETY: this function's AVX2; `each_block` passes whole blocks of 176 bytes and 256
        // integers.
        q4_k_block(b, d, q, s, f16, |b, q, sc| unsafe { q5_k_sum_avx2(b, q, sc) })
    })
}

/// [`rows`] of Q6_K on AVX2.
///
/// # Safety
/// AVX2 is available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn q6_k_rows_avx2(m: &Matrix, xs: &[Q8k], outs: &mut [&mut [f32]]) {
    // SAFETY: this function's AVX2; `each_block` passes whole blocks of 210 bytes, 256 integers
    // and their 16 sums.
    each_block(m, Q6_K_BYTES, xs, outs, |b, d, q, s| {
        q6_k_block(b, d, q, s, |b, q, s| unsafe { q6_k_sum_avx2(b, q, s) })
    })
}

/// Each row's value against each vector: `block(bytes, dₓ, integers, sums)` of every block, added
/// in order from `−0`.
#[inline(always)]
fn each_block(
    m: &Matrix,
    bytes: usize,
    xs: &[Q8k],
    outs: &mut [&mut [f32]],
    block: impl Fn(&[u8], f32, &[i8], &[i16]) -> f32,
) {
    for r in 0..m.rows() {
        let row = m.row(r);
        for (x, o) in xs.iter().zip(outs.iter_mut()) {
            let mut acc = -0.0f32;
            for (k, b) in row.chunks_exact(bytes).enumerate() {
                acc += block(b, x.d[k], &x.q[k * QK..(k + 1) * QK], &x.sums[k * 16..(k + 1) * 16]);
            }
            o[r] = acc;
        }
    }
}

/// One Q4_K block's `v` against a Q8_K block (`d`, its 256 integers `q`, their 16 sums), its
/// integer sum by `sum` and its f16 factors widened by `f16` (each exact).
#[inline(always)]
fn q4_k_block(
    block: &[u8],
    d: f32,
    q: &[i8],
    sums: &[i16],
    f16: impl Fn(&[u8], usize) -> f32,
    sum: impl Fn(&[u8], &[i8], &[i16; 8]) -> i32,
) -> f32 {
    let (scales, mins) = scales_mins(&block[4..16]);
    let summ: i32 = (0..8).map(|s| i32::from(mins[s]) * (i32::from(sums[2 * s]) + i32::from(sums[2 * s + 1]))).sum();
    let sumi = sum(block, q, &scales.map(i16::from));
    (f16(block, 0) * d) * sumi as f32 - (f16(block, 2) * d) * summ as f32
}

/// The 8 scales and 8 minimums of a Q4_K block's 12 packed bytes, four at a time in 32-bit words:
/// the bytes `scale_min` reads one at a time (`kquants.rs`), the same bits.
#[inline(always)]
fn scales_mins(b: &[u8]) -> ([u8; 8], [u8; 8]) {
    let word = |i: usize| u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
    let (w0, w1, w2) = (word(0), word(1), word(2));
    let (six, four, two) = (0x3f3f_3f3f, 0x0f0f_0f0f, 0x0303_0303);
    let scales_hi = (w2 & four) | (((w0 >> 6) & two) << 4);
    let mins_hi = ((w2 >> 4) & four) | (((w1 >> 6) & two) << 4);
    let join = |lo: u32, hi: u32| {
        let (lo, hi) = (lo.to_le_bytes(), hi.to_le_bytes());
        [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]]
    };
    (join(w0 & six, scales_hi), join(w1 & six, mins_hi))
}

/// `Σₛ scaleₛ · Σᵢ qᵢ · xqᵢ` of a Q4_K block, one product at a time.
fn q4_k_sum(block: &[u8], q: &[i8], scales: &[i16; 8]) -> i32 {
    let qs = &block[16..144];
    (0..8)
        .map(|s| {
            let (c, shift) = (s / 2, 4 * (s % 2));
            let dot: i32 = (0..32).map(|i| i32::from((qs[32 * c + i] >> shift) & 15) * i32::from(q[32 * s + i])).sum();
            i32::from(scales[s]) * dot
        })
        .sum()
}

/// [`q4_k_sum`] in AVX2: per chunk of 64 values, the 32 quant bytes' low and high nibbles
/// multiplied by the 64 integers in pairs (`maddubs`: at most `2 · 15 · 127`, no saturation), then
/// by their sub-block's scale (`madd`), summed in i32 lanes.
///
/// # Safety
/// AVX2 is available, `block` holds 144 bytes and `q` 256 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn q4_k_sum_avx2(block: &[u8], q: &[i8], scales: &[i16; 8]) -> i32 {
    let nibble = _mm256_set1_epi8(15);
    let mut acc = _mm256_setzero_si256();
    for c in 0..4 {
        // SAFETY: bytes `16 + 32c .. + 32` are within the block's 144 and integers `64c .. + 64`
        // within `q`'s 256 (c < 4), as the caller states.
        let (bytes, lo_q, hi_q) = unsafe {
            (
                _mm256_loadu_si256(block.as_ptr().add(16 + 32 * c).cast()),
                _mm256_loadu_si256(q.as_ptr().add(64 * c).cast()),
                _mm256_loadu_si256(q.as_ptr().add(64 * c + 32).cast()),
            )
        };
        let lo = _mm256_and_si256(bytes, nibble);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bytes), nibble);
        let lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, lo_q), _mm256_set1_epi16(scales[2 * c]));
        let hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, hi_q), _mm256_set1_epi16(scales[2 * c + 1]));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(lo, hi));
    }
    sum_i32(acc)
}

/// `Σₛ scaleₛ · Σᵢ qᵢ · xqᵢ` of a Q5_K block (Q4_K's, each quant with its fifth bit from `qh`: bit
/// `s` of `qh[i]` for value `i` of sub-block `s`), one product at a time.
fn q5_k_sum(block: &[u8], q: &[i8], scales: &[i16; 8]) -> i32 {
    let (qh, qs) = (&block[16..48], &block[48..176]);
    (0..8)
        .map(|s| {
            let (c, shift) = (s / 2, 4 * (s % 2));
            let dot: i32 = (0..32)
                .map(|i| {
                    let quant = ((qs[32 * c + i] >> shift) & 15) | (((qh[i] >> s) & 1) << 4);
                    i32::from(quant) * i32::from(q[32 * s + i])
                })
                .sum();
            i32::from(scales[s]) * dot
        })
        .sum()
}

/// [`q5_k_sum`] in AVX2: [`q4_k_sum_avx2`]'s, each nibble with its fifth bit from `qh` (shifted 16
/// bits at a time by the sub-block's index, masked to each byte's bit 0, then moved to bit 4:
/// quants at most 31, so `maddubs` stays within `2 · 31 · 127`).
///
/// # Safety
/// AVX2 is available, `block` holds 176 bytes and `q` 256 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn q5_k_sum_avx2(block: &[u8], q: &[i8], scales: &[i16; 8]) -> i32 {
    let (nibble, one) = (_mm256_set1_epi8(15), _mm256_set1_epi8(1));
    // SAFETY: `qh`, bytes `16 .. 48`, is within the block's 176, as the caller states.
    let qh = unsafe { _mm256_loadu_si256(block.as_ptr().add(16).cast()) };
    let fifth = |s: usize| {
        let bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s as i32)), one);
        _mm256_slli_epi16::<4>(bit)
    };
    let mut acc = _mm256_setzero_si256();
    for c in 0..4 {
        // SAFETY: bytes `48 + 32c .. + 32` are within the block's 176 and integers `64c .. + 64`
        // within `q`'s 256 (c < 4), as the caller states.
        let (bytes, lo_q, hi_q) = unsafe {
            (
                _mm256_loadu_si256(block.as_ptr().add(48 + 32 * c).cast()),
                _mm256_loadu_si256(q.as_ptr().add(64 * c).cast()),
                _mm256_loadu_si256(q.as_ptr().add(64 * c + 32).cast()),
            )
        };
        let lo = _mm256_or_si256(_mm256_and_si256(bytes, nibble), fifth(2 * c));
        let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(bytes), nibble), fifth(2 * c + 1));
        let lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, lo_q), _mm256_set1_epi16(scales[2 * c]));
        let hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, hi_q), _mm256_set1_epi16(scales[2 * c + 1]));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(lo, hi));
    }
    sum_i32(acc)
}

/// One Q6_K block's `v` against a Q8_K block, its integer sum by `sum`.
#[inline(always)]
fn q6_k_block(block: &[u8], d: f32, q: &[i8], sums: &[i16], sum: impl Fn(&[u8], &[i8], &[i16]) -> i32) -> f32 {
    (f16_at(block, 208) * d) * sum(block, q, sums) as f32
}

/// `Σₛ scaleₛ · Σᵢ (qᵢ − 32) · xqᵢ` of a Q6_K block, one product at a time.
fn q6_k_sum(block: &[u8], q: &[i8], _sums: &[i16]) -> i32 {
    let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
    (0..16)
        .map(|s| {
            let dot: i32 = (16 * s..16 * s + 16)
                .map(|v| {
                    let (h, j, i) = (v / 128, v % 128 / 32, v % 32);
                    let low = (ql[64 * h + 32 * (j % 2) + i] >> (4 * (j / 2))) & 15;
                    let high = (qh[32 * h + i] >> (2 * j)) & 3;
                    (i32::from(low | (high << 4)) - 32) * i32::from(q[v])
                })
                .sum();
            i32::from(scales[s] as i8) * dot
        })
        .sum()
}

/// [`q6_k_sum`] in AVX2: per quarter of a half, the 32 unsigned 6-bit quants in one register
/// (`kquants::q6_k_quarters`, as the f32 path reads them) multiplied by the 32 integers in pairs (`maddubs`: at most
/// `2 · 63 · 127`), then by the two sub-blocks' scales (`madd`, the pair of scales picked from the
/// 16 by a permute and a shuffle); the `− 32` of every quant is taken off first, as
/// `32 · Σₛ scaleₛ · sumₛ` (`madd` of the scales with the sums), exactly.
///
/// # Safety
/// AVX2 is available, `block` holds 210 bytes, `q` 256 values and `sums` 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn q6_k_sum_avx2(block: &[u8], q: &[i8], sums: &[i16]) -> i32 {
    // SAFETY: scale bytes `192 .. 208` are within the block's 210 and `sums` holds 16, as the
    // caller states.
    let (scales, sums) = unsafe {
        (
            _mm256_cvtepi8_epi16(_mm_loadu_si128(block.as_ptr().add(192).cast())),
            _mm256_loadu_si256(sums.as_ptr().cast()),
        )
    };
    let mut acc = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<5>(_mm256_madd_epi16(scales, sums)));
    // Of a dword holding scales `s` and `s + 1`, the first in every word of the low lane, the
    // second in every word of the high lane.
    let spread = _mm256_setr_epi8(
        0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
    );
    for h in 0..2 {
        // SAFETY: this function's AVX2; the block is 210 bytes, as the caller states, and h < 2.
        let quarters = unsafe { q6_k_quarters(block, h) };
        for (j, quants) in quarters.into_iter().enumerate() {
            let at = 128 * h + 32 * j;
            // SAFETY: integers `at .. at + 32` are within `q`'s 256 (h < 2, j < 4).
            let xq = unsafe { _mm256_loadu_si256(q.as_ptr().add(at).cast()) };
            let pair = _mm256_permutevar8x32_epi32(scales, _mm256_set1_epi32((at / 32) as i32));
            let scale = _mm256_shuffle_epi8(pair, spread);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(quants, xq), scale));
        }
    }
    sum_i32(acc)
}

/// The sum of a register's 8 i32 lanes (exact: the callers' sums cannot overflow).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn sum_i32(v: __m256i) -> i32 {
    let half = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let quarter = _mm_add_epi32(half, _mm_unpackhi_epi64(half, half));
    _mm_cvtsi128_si32(quarter) + _mm_extract_epi32::<1>(quarter)
}
