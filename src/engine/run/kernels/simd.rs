//! The AVX2 pieces every type family's SIMD path is made of: a batch's accumulators, one weight
//! register multiplied into each of them, and their sum at the end of a row.
//!
//! A row's dot products with a batch of `B` vectors keep `B × L` accumulators of 8 f32 lanes: `B`
//! for the vectors, and `L` independent ones per vector so that a small batch still has enough fused
//! multiply-adds in flight (a batch of 1 uses 4, since an FMA takes 4 cycles and two issue per
//! cycle). Each weight register is loaded (dequantized) once and multiplied into all `B`.
//!
//! Every function here is `unsafe`: each runs AVX2 and FMA instructions, which the caller has
//! checked the machine has ([`super::detected`]), and [`fma`] also reads through raw pointers,
//! whose bounds its caller states.

use std::arch::x86_64::*;

/// The accumulators of a row against `B` vectors, `L` per vector.
pub(super) type Acc<const B: usize, const L: usize> = [[__m256; L]; B];

/// `B × L` accumulators at zero.
///
/// # Safety
/// AVX is available.
#[inline(always)]
pub(super) unsafe fn zero<const B: usize, const L: usize>() -> Acc<B, L> {
    // SAFETY: the caller has AVX.
    unsafe { [[_mm256_setzero_ps(); L]; B] }
}

/// `acc[b][lane % L] += w · xs[b][at .. at + 8]` for each of the `B` vectors.
///
/// # Safety
/// AVX2 and FMA are available, and `xs[b] + at .. xs[b] + at + 8` are readable f32 values for
/// every `b`.
#[inline(always)]
pub(super) unsafe fn fma<const B: usize, const L: usize>(
    acc: &mut Acc<B, L>,
    w: __m256,
    xs: &[*const f32; B],
    at: usize,
    lane: usize,
) {
    for b in 0..B {
        // SAFETY: the caller's bounds on `xs[b] + at .. + 8`, and its FMA.
        unsafe {
            let x = _mm256_loadu_ps(xs[b].add(at));
            acc[b][lane % L] = _mm256_fmadd_ps(w, x, acc[b][lane % L]);
        }
    }
}

/// Each vector's sum of its `L` accumulators' 8 lanes, into `out[b]`.
///
/// # Safety
/// AVX is available.
#[inline(always)]
pub(super) unsafe fn finish<const B: usize, const L: usize>(acc: &Acc<B, L>, out: &mut [f32]) {
    for (b, o) in out.iter_mut().enumerate().take(B) {
        // SAFETY: the caller has AVX; the lanes are read from a register.
        unsafe {
            let v = acc[b][1..].iter().fold(acc[b][0], |v, a| _mm256_add_ps(v, *a));
            let four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
            let one = _mm_add_ss(two, _mm_shuffle_ps::<0b01>(two, two));
            *o = _mm_cvtss_f32(one);
        }
    }
}

/// The raw pointers of a batch's vectors, each checked to hold at least `cols` values: the bound
/// every [`fma`] of a row kernel relies on.
#[inline(always)]
pub(super) fn pointers<const B: usize>(xs: &[&[f32]], cols: usize) -> [*const f32; B] {
    assert_eq!(xs.len(), B, "a kernel of batch {B} was given {} vectors", xs.len());
    std::array::from_fn(|b| {
        assert!(xs[b].len() >= cols, "a vector of {} values against a row of {cols}", xs[b].len());
        xs[b].as_ptr()
    })
}

/// Calls `$f::<G.., B, L>($row, $xs, $out)` for the batch size `$xs.len()` (1 to 8), with the
/// accumulators per vector that size wants: 4 for one vector, 2 for two, 1 beyond. `G..` are the
/// function's other generic arguments, if any (`by_batch!(f[E], …)`).
macro_rules! by_batch {
    ($f:ident $([$($g:ty),*])?, $row:expr, $xs:expr, $out:expr) => {
        match $xs.len() {
            1 => $f::<$($($g,)*)? 1, 4>($row, $xs, $out),
            2 => $f::<$($($g,)*)? 2, 2>($row, $xs, $out),
            3 => $f::<$($($g,)*)? 3, 1>($row, $xs, $out),
            4 => $f::<$($($g,)*)? 4, 1>($row, $xs, $out),
            5 => $f::<$($($g,)*)? 5, 1>($row, $xs, $out),
            6 => $f::<$($($g,)*)? 6, 1>($row, $xs, $out),
            7 => $f::<$($($g,)*)? 7, 1>($row, $xs, $out),
            8 => $f::<$($($g,)*)? 8, 1>($row, $xs, $out),
            n => panic!("a batch of {n} vectors in one pass (at most {})", super::MAX_BATCH),
        }
    };
}
pub(super) use by_batch;

/// The little-endian f16 at `b[at..at + 2]`, widened (exactly) by F16C, in registers: the scalar
/// widening of the `half` crate is a call, which would spill every accumulator once per block.
///
/// # Safety
/// F16C is available.
#[inline(always)]
pub(super) unsafe fn f16_at(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    // SAFETY: the caller's F16C; the value is in a register.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits)))) }
}
