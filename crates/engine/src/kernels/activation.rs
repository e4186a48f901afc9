//! The engine's sigmoid and SiLU of f32 values, a slice at a time in SIMD registers.
//!
//! Both are computed in f64 and rounded to f32 once, by [`formats::scalar`]'s formulas:
//! `σ(x) = 1 / (1 + e^−x)` for `x ≥ 0` and `e^x / (1 + e^x)` below, `silu(x) = x·σ(x)`. Only
//! `e^−|x|` is the engine's own ([`exp_neg_abs`]): `2^n · p(r)`, where `n` is the integer nearest
//! `−|x| / ln 2`, `r = −|x| − n·ln 2` (ln 2 in Cody and Waite's two parts, so that `n·ln 2`'s
//! first part is exact) and `p` is the degree-13 Taylor polynomial of `e^r`, whose remainder is
//! below `5·10⁻¹⁸` for `|r| ≤ ln 2 / 2`; below −708 it is 0, where the exact value is under
//! `2⁻¹⁰²¹` and every σ and silu that reads it rounds to the same f32 either way. It is within a
//! few f64 units of the exact value (`tests/kernels.rs` holds it to 4 of glibc's `exp`), so an f32
//! result differs from `scalar::silu(x) as f32` only where the f64 value lies within about `10⁻¹⁵`
//! of halfway between two f32 values, and then by one unit: the engine's σ and silu stay within
//! half a unit of f32 (and `10⁻¹⁵`) of the exact ones, the error the check models for them.
//!
//! The loop over a slice has no branch and no call, so the compiler vectorizes it. It is compiled
//! three times from one source (portable, AVX2, AVX-512F) with no fused multiply-add written and
//! none made by the compiler, so the three are the same f64 operations in the same order, and a
//! value is the same on every path and in every slice (`tests/kernels.rs`).

use super::{Isa, detected};

/// ln 2's first 32 bits (its low 21 mantissa bits zero, so `n·LN2_HI` is exact for `|n| < 2¹¹`).
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
/// `ln 2 − LN2_HI`, to f64.
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// `1.5·2⁵²`: added to a value under `2⁵¹` in magnitude, it rounds that value to an integer, held
/// in the low mantissa bits of the sum.
const ROUNDER: f64 = 6_755_399_441_055_744.0;
/// Below this argument, [`exp_neg_abs`] is 0 (its `2^n` would leave f64's normal range).
const UNDERFLOW: f64 = -708.0;
/// `1/k!` for `k` = 13 down to 2, Horner's order.
const TAYLOR: [f64; 12] = [
    1.0 / 6_227_020_800.0,
    1.0 / 479_001_600.0,
    1.0 / 39_916_800.0,
    1.0 / 3_628_800.0,
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    1.0 / 2.0,
];

/// `e^−|x|`, as the module's doc says; NaN for NaN.
#[inline(always)]
pub fn exp_neg_abs(x: f64) -> f64 {
    let a = -x.abs();
    let shifted = a * std::f64::consts::LOG2_E + ROUNDER;
    let n = shifted - ROUNDER;
    let r = (a - n * LN2_HI) - n * LN2_LO;
    let mut p = TAYLOR[0];
    for c in &TAYLOR[1..] {
        p = p * r + c;
    }
    p = (p * r + 1.0) * r + 1.0;
    // `shifted`'s bits are ROUNDER's plus `n` (both in [2⁵², 2⁵³)); 2ⁿ's exponent field is n + 1023.
    let n_bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits());
    let two_n = f64::from_bits(n_bits.wrapping_add(1023) << 52);
    if a < UNDERFLOW { 0.0 } else { p * two_n }
}

/// `σ(x)` in f64, [`formats::scalar::sigmoid`]'s formula over [`exp_neg_abs`].
#[inline(always)]
fn sigmoid_wide(x: f64) -> f64 {
    let e = exp_neg_abs(x);
    let numerator = if x >= 0.0 { 1.0 } else { e };
    numerator / (1.0 + e)
}

/// The engine's `σ(x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    sigmoid_wide(f64::from(x)) as f32
}

/// The engine's `silu(x) = x·σ(x)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    let x = f64::from(x);
    (x * sigmoid_wide(x)) as f32
}

/// Every value of `xs` replaced by its [`silu`], on this machine's widest path.
pub(crate) fn silu_all(xs: &mut [f32]) {
    silu_all_on(detected(), xs);
}

/// Every value of `xs` replaced by its [`sigmoid`], on this machine's widest path.
pub(crate) fn sigmoid_all(xs: &mut [f32]) {
    sigmoid_all_on(detected(), xs);
}

/// [`silu_all`] on `isa`'s path, or the widest this machine has below it.
pub fn silu_all_on(isa: Isa, xs: &mut [f32]) {
    on_path(isa, xs, paths::SILU);
}

/// [`sigmoid_all`] on `isa`'s path, or the widest this machine has below it.
pub fn sigmoid_all_on(isa: Isa, xs: &mut [f32]) {
    on_path(isa, xs, paths::SIGMOID);
}

/// Runs the path of `paths` that `isa` asks for and this machine has.
fn on_path(isa: Isa, xs: &mut [f32], paths: paths::Paths) {
    match isa.available() {
        Isa::Scalar => (paths.portable)(xs),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `available` keeps `Isa::Avx2` only where `detected()` found AVX2 (and FMA and
        // F16C), the instruction set `paths.avx2` is compiled for.
        Isa::Avx2 => unsafe { (paths.avx2)(xs) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `available` keeps `Isa::Avx512` only where `detected()` also found AVX-512F, the
        // instruction sets `paths.avx512` is compiled for.
        Isa::Avx512 => unsafe { (paths.avx512)(xs) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => (paths.portable)(xs),
    }
}

/// Each function's loop, compiled once per path.
mod paths {
    /// One function's three compilations.
    #[derive(Clone, Copy)]
    pub(super) struct Paths {
        pub(super) portable: fn(&mut [f32]),
        /// Callable only where [`super::detected`] found AVX2.
        #[cfg(target_arch = "x86_64")]
        pub(super) avx2: unsafe fn(&mut [f32]),
        /// Callable only where [`super::detected`] found AVX-512F.
        #[cfg(target_arch = "x86_64")]
        pub(super) avx512: unsafe fn(&mut [f32]),
    }

    /// `f` over a slice, for every path: the loop is inlined into each compilation.
    macro_rules! paths_of {
        ($name:ident, $f:path) => {
            pub(super) const $name: Paths = {
                fn portable(xs: &mut [f32]) {
                    xs.iter_mut().for_each(|x| *x = $f(*x));
                }
                /// # Safety
                ///
                /// Callable only where [`super::detected`] found AVX2.
                #[cfg(target_arch = "x86_64")]
                #[target_feature(enable = "avx2")]
                unsafe fn avx2(xs: &mut [f32]) {
                    xs.iter_mut().for_each(|x| *x = $f(*x));
                }
                /// # Safety
                ///
                /// Callable only where [`super::detected`] found AVX-512F.
                #[cfg(target_arch = "x86_64")]
                #[target_feature(enable = "avx2,avx512f")]
                unsafe fn avx512(xs: &mut [f32]) {
                    xs.iter_mut().for_each(|x| *x = $f(*x));
                }
                Paths {
                    portable,
                    #[cfg(target_arch = "x86_64")]
                    avx2,
                    #[cfg(target_arch = "x86_64")]
                    avx512,
                }
            };
        };
    }

    paths_of!(SILU, super::silu);
    paths_of!(SIGMOID, super::sigmoid);
}
