//! The float types' two-row kernel in 512-bit registers, for a batch on [`super::Isa::Avx512`].
//!
//! It keeps `simd.rs`'s rule — a vector's products go into [`CHAINS`] chains of 8 lanes, the `i`-th
//! 8 values of the row into chain `i % 4`, the chains then added in order and their lanes as
//! [`finish`] adds them — with two chains in each 512-bit register: the 16 values at `32·q` are
//! chains 0 and 1 (its low and high 8 lanes), the 16 at `32·q + 16` chains 2 and 3. A 512-bit fused
//! multiply-add is the two 256-bit ones of its halves, lane for lane; so each chain receives the
//! very products, in the very order, of the 256-bit path, and a vector's value is
//! [`super::float::pair_avx2`]'s bit for bit (`tests/kernels.rs` holds the two paths to each
//! other). A row's last 8-value groups (fewer than 4) are added under a lane mask, which leaves
//! the other lanes of a register as they are. A pass serves two rows and up to [`MOST`] vectors
//! from registers, so a batch of 8 is two passes over a row where 256-bit registers need three.
//! The lines of the next group of rows are asked for along the loop (`ahead.rs`).

use std::arch::x86_64::*;

use super::ahead::Spread;
use super::float::Element;
use super::simd::{Acc, CHAINS, by_batch, finish};

/// The most vectors one pass of [`pair`] serves from registers (20 accumulators). Measured on one
/// thread against `[128, 1024]` f32 from cache: a pass of 5 vectors at 49–50 G multiply-adds a
/// second, of 4 at 47; a pass of 6 (24 accumulators, which the compiler spills) at 19–21, so a
/// batch of 6 runs as two passes of 3 (44–45).
pub(super) const MOST: usize = 5;

/// A float type's 16 values as two chains of one register.
pub(super) trait Element512: Element {
    /// The 16 values whose bytes start at `p`, widened to f32.
    ///
    /// # Safety
    /// AVX-512F, AVX2 and F16C are available and `p .. p + 16 · BYTES` is readable.
    unsafe fn widen16(p: *const u8) -> __m512;
}

impl Element512 for super::float::F32 {
    #[inline(always)]
    unsafe fn widen16(p: *const u8) -> __m512 {
        // SAFETY: the caller's bounds and AVX-512F; an unaligned load.
        unsafe { _mm512_loadu_ps(p.cast()) }
    }
}

impl Element512 for super::float::F16 {
    #[inline(always)]
    unsafe fn widen16(p: *const u8) -> __m512 {
        // SAFETY: the caller's bounds (32 bytes) and AVX-512F (`vcvtph2ps` on 16 halves, exact).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
}

impl Element512 for super::float::Bf16 {
    #[inline(always)]
    unsafe fn widen16(p: *const u8) -> __m512 {
        // SAFETY: the caller's bounds (32 bytes) and AVX-512F.
        unsafe {
            let halves = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast()));
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(halves))
        }
    }
}

/// Two rows' dot products with the vectors of one pass (1 to [`MOST`] from registers), each row's
/// values those of [`super::float::pair_avx2`].
///
/// # Safety
/// AVX2, FMA, F16C, AVX-512F and AVX-512VL are available.
pub(super) unsafe fn pair_avx512<E: Element512>(rows: [&[u8]; 2], xs: &[&[f32]], outs: [&mut [f32]; 2], ahead: &[u8]) {
    // SAFETY: the caller's instruction sets, which are `pair`'s.
    unsafe { by_batch!(pair[E], xs.len(), (rows, xs, outs, ahead)) }
}

/// A row's accumulators against `B` vectors: chains 0 and 1, and 2 and 3, per vector.
type Wide<const B: usize> = [[__m512; 2]; B];

/// Two rows against `B` vectors, 32 values at a time, then the last 8-value groups under a mask,
/// then each sum finished as `simd.rs` finishes it and the last values (fewer than 8) added in
/// order.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[allow(clippy::needless_range_loop, reason = "constant indices once unrolled keep the accumulators in registers")]
fn pair<E: Element512, const B: usize>(rows: [&[u8]; 2], xs: &[&[f32]], outs: [&mut [f32]; 2], ahead: &[u8]) {
    assert_eq!(rows[0].len(), rows[1].len(), "a pair of rows of one length");
    let cols = rows[0].len() / E::BYTES;
    let p = super::simd::pointers::<B>(xs, cols);
    let groups = cols / 8;
    let quads = groups / 4;
    let mut acc: [Wide<B>; 2] = [[[_mm512_setzero_ps(); 2]; B]; 2];
    let mut spread = Spread::new(ahead, quads);
    for q in 0..quads {
        spread.step();
        let at = 32 * q;
        for half in 0..2 {
            let at = at + 16 * half;
            // SAFETY: `at + 16 <= 32 · quads <= cols`: within both rows (of one length) and within
            // each vector, which `pointers` checked holds `cols` values.
            unsafe {
                let w = rows.map(|row| E::widen16(row.as_ptr().add(at * E::BYTES)));
                for b in 0..B {
                    let x = _mm512_loadu_ps(p[b].add(at));
                    for r in 0..2 {
                        acc[r][b][half] = _mm512_fmadd_ps(w[r], x, acc[r][b][half]);
                    }
                }
            }
        }
    }
    spread.finish();
    // The last 1 to 3 groups of 8: group `t` is chain `t`, the low or high lanes of a register.
    for t in 0..groups % 4 {
        let at = 32 * quads + 8 * t;
        let (half, lanes): (usize, __mmask16) = (t / 2, if t % 2 == 0 { 0x00ff } else { 0xff00 });
        // SAFETY: `at + 8 <= 8 · groups <= cols`, within both rows and each vector. The 8 values
        // are put in the lanes `lanes` names (the others zero), and the masked multiply-add leaves
        // every other lane of the accumulator as it is.
        unsafe {
            let place = |v: __m256| match lanes {
                0x00ff => _mm512_zextps256_ps512(v),
                _ => _mm512_castpd_ps(_mm512_insertf64x4::<1>(_mm512_setzero_pd(), _mm256_castps_pd(v))),
            };
            let w = rows.map(|row| place(E::widen8(row.as_ptr().add(at * E::BYTES))));
            for b in 0..B {
                let x = place(_mm256_loadu_ps(p[b].add(at)));
                for r in 0..2 {
                    acc[r][b][half] = _mm512_mask3_fmadd_ps(w[r], x, acc[r][b][half], lanes);
                }
            }
        }
    }
    let whole = groups * 8;
    for ((acc, row), out) in acc.iter().zip(rows).zip(outs) {
        let chains: Acc<B> = std::array::from_fn(|b| {
            let [lo, hi] = acc[b];
            let halves = |v: __m512| {
                (_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))))
            };
            let ((c0, c1), (c2, c3)) = (halves(lo), halves(hi));
            [c0, c1, c2, c3]
        });
        const { assert!(CHAINS == 4, "two chains per 512-bit register, two registers") };
        // SAFETY: the instruction sets are this function's.
        unsafe { finish(&chains, out) };
        for (x, o) in xs.iter().zip(out.iter_mut()) {
            for c in whole..cols {
                *o += E::widen(&row[c * E::BYTES..]) * x[c];
            }
        }
    }
}
