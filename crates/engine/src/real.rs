//! The arithmetic an engine run computes in, and how it treats what it stores.
//!
//! The engine's units are written once over a [`Real`]: `f32` is the engine (f32 arithmetic and
//! accumulation, the program's storage types); `f64` runs the very same code with f64 arithmetic,
//! so that the check can judge the program's structure apart from its rounding (`check`'s
//! structure; the engine's f32 run is judged Command by Command, `check::command`). Weights stay in
//! their stored types; a matrix is read by [`Real::matvec`]: the engine's kernels
//! ([`super::kernels::matvec`]) in f32, each row's exact dequantized values otherwise, so that every
//! arithmetic reads the same weights.

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub};

use super::kernels::{self, Matrix};
use program::numerics::Storage;

/// A floating-point type the engine's units compute in.
pub trait Real:
    Copy
    + Debug
    + Default
    + PartialOrd
    + Send
    + Sync
    + 'static
    + From<f32>
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + MulAssign
    + Sum
{
    /// The value nearest to `x` (for f32, `x as f32`).
    fn of(x: f64) -> Self;
    /// The value in f64.
    fn wide(self) -> f64;
    /// `f` (a scalar function of [`formats::scalar`]) applied in f64 and brought back, as the
    /// engine applies it: for f32, `f(x as f64) as f32`.
    fn apply(self, f: fn(f64) -> f64) -> Self;
    /// `σ(x)`: [`formats::scalar::sigmoid`] applied as [`Real::apply`] applies it, except in the
    /// engine's f32, which computes its own `e^−|x|` ([`kernels::activation`]).
    fn sigmoid(self) -> Self {
        self.apply(formats::scalar::sigmoid)
    }
    /// `silu(x)`, as [`Real::sigmoid`] is `σ(x)`.
    fn silu(self) -> Self {
        self.apply(formats::scalar::silu)
    }
    /// Every value of `xs` replaced by its [`Real::silu`] (in f32, a slice at a time in SIMD
    /// registers, each value the same as one at a time).
    fn silu_all(xs: &mut [Self]) {
        xs.iter_mut().for_each(|x| *x = x.silu());
    }
    /// Every value of `xs` replaced by its [`Real::sigmoid`], as [`Real::silu_all`] does `silu`.
    fn sigmoid_all(xs: &mut [Self]) {
        xs.iter_mut().for_each(|x| *x = x.sigmoid());
    }
    fn sqrt(self) -> Self;
    fn exp(self) -> Self;
    fn max(self, other: Self) -> Self;
    const NEG_INFINITY: Self;
    /// `x` rounded to `storage`'s nearest value (round to nearest even); f32 storage keeps it.
    fn round_to(self, storage: Storage) -> Self;
    /// `Σ a[i]·b[i]` as [`super::dot::dot`] computes it.
    fn dot<W: Copy>(a: &[W], b: &[Self]) -> Self
    where
        Self: From<W>,
    {
        super::dot::lanes(a, b)
    }
    /// `out = m · x` for a matrix in its stored type, `x` of `m.cols()` values and `out` of
    /// `m.rows()`, the rows over up to `threads` threads: each row's exact dequantized values
    /// dotted with `x` by [`Real::dot`] ([`super::units::rows_matvec`]). The engine's f32 runs its
    /// kernels instead.
    fn matvec(m: &Matrix, x: &[Self], out: &mut [Self], threads: usize) {
        super::units::rows_matvec(m, x, out, threads);
    }
}

impl Real for f32 {
    /// The engine's kernels: each block dequantized as it is read, accumulated in f32.
    fn matvec(m: &Matrix, x: &[f32], out: &mut [f32], threads: usize) {
        kernels::matvec(m, x, out, threads);
    }
    fn of(x: f64) -> f32 {
        x as f32
    }
    fn wide(self) -> f64 {
        f64::from(self)
    }
    fn apply(self, f: fn(f64) -> f64) -> f32 {
        f(f64::from(self)) as f32
    }
    fn sigmoid(self) -> f32 {
        kernels::activation::sigmoid(self)
    }
    fn silu(self) -> f32 {
        kernels::activation::silu(self)
    }
    fn silu_all(xs: &mut [f32]) {
        kernels::activation::silu_all(xs);
    }
    fn sigmoid_all(xs: &mut [f32]) {
        kernels::activation::sigmoid_all(xs);
    }
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    fn exp(self) -> f32 {
        f32::exp(self)
    }
    fn max(self, other: f32) -> f32 {
        f32::max(self, other)
    }
    const NEG_INFINITY: f32 = f32::NEG_INFINITY;
    #[inline]
    fn round_to(self, storage: Storage) -> f32 {
        #[cfg(any(test, feature = "planted"))]
        if storage == Storage::F16 && planted::is(planted::Bug::EngineF16AsBf16) {
            return Storage::Bf16.round(self);
        }
        storage.round(self)
    }
}

impl Real for f64 {
    fn of(x: f64) -> f64 {
        x
    }
    fn wide(self) -> f64 {
        self
    }
    fn apply(self, f: fn(f64) -> f64) -> f64 {
        f(self)
    }
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
    fn exp(self) -> f64 {
        f64::exp(self)
    }
    fn max(self, other: f64) -> f64 {
        f64::max(self, other)
    }
    const NEG_INFINITY: f64 = f64::NEG_INFINITY;
    /// Rounds from f64 directly, to nearest even, on the bits (not through f32's rounding, nor
    /// `half`'s `from_f64`, which drops the low 32 bits of the mantissa before it rounds and so
    /// misrounds values next to a tie).
    fn round_to(self, storage: Storage) -> f64 {
        match storage {
            Storage::F32 => self,
            // (explicit mantissa bits, least normal exponent, largest finite value)
            Storage::Bf16 => nearest(self, 7, -126, f64::from(f32::MAX)),
            Storage::F16 => nearest(self, 10, -14, 65504.0),
        }
    }
}

/// `x` rounded to nearest even in a binary format of `mantissa` explicit bits whose normals
/// start at `2^min_exp` and whose largest finite value is `max` (beyond it: ±∞).
fn nearest(x: f64, mantissa: u32, min_exp: i32, max: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let r = if x.abs() < 2f64.powi(min_exp) {
        // Subnormal: a multiple of the least subnormal.
        let step = 2f64.powi(min_exp - mantissa as i32);
        (x / step).round_ties_even() * step
    } else {
        let drop = 52 - mantissa;
        let bits = x.to_bits();
        let lsb = (bits >> drop) & 1;
        let rounded = (bits + (1u64 << (drop - 1)) - 1 + lsb) & !((1u64 << drop) - 1);
        f64::from_bits(rounded)
    };
    if r.abs() > max { f64::INFINITY.copysign(x) } else { r }
}

/// What a run does where the engine stores a value (a buffer a unit writes, a conv window, a
/// delta state, a KV cache).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rounding {
    /// Rounds it to its storage type: the engine as it runs.
    #[default]
    Stored,
    /// Keeps it as computed: the program's structure at the arithmetic's own precision.
    Exact,
}

/// Where a value is stored: its type and what the run does there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keep {
    pub storage: Storage,
    pub rounding: Rounding,
}

impl Keep {
    /// The value `x` as it is kept.
    #[inline]
    pub fn keep<R: Real>(self, x: R) -> R {
        match self.rounding {
            Rounding::Stored => x.round_to(self.storage),
            Rounding::Exact => x,
        }
    }

    /// Every value of `out` as it is kept.
    pub(crate) fn keep_all<R: Real>(self, out: &mut [R]) {
        if self.rounding == Rounding::Exact || self.storage == Storage::F32 {
            return;
        }
        for x in out {
            *x = self.keep(*x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rounding_keeps_a_value_as_it_says() {
        let x = 1.0f64 + 2f64.powi(-20);
        // (storage, rounding, value kept)
        let cases = [
            (Storage::Bf16, Rounding::Stored, 1.0),
            (Storage::F16, Rounding::Stored, 1.0),
            (Storage::F32, Rounding::Stored, x),
            (Storage::Bf16, Rounding::Exact, x),
        ];
        for (storage, rounding, want) in cases {
            assert_eq!(Keep { storage, rounding }.keep(x), want, "{storage} {rounding:?}");
        }
    }
}
