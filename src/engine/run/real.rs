//! The arithmetic an engine run computes in, and how it treats what it stores.
//!
//! The engine's units are written once over a [`Real`]: `f32` is the engine (f32 arithmetic and
//! accumulation, the program's storage types); `f64` runs the very same code with f64 arithmetic,
//! so that the check can judge the program's structure apart from its rounding; [`Shadowed`]
//! runs both at once, value by value, so that the check can judge the engine's numerics without
//! the rounding flips that separate two independent runs (`check::tolerance`). Weights stay in
//! their stored types; a matrix is read by [`Real::matvec`]: the engine's kernels
//! ([`super::kernels::matvec`]) in f32, each row's exact dequantized values otherwise, so that every
//! arithmetic reads the same weights.

use std::cmp::Ordering;
use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub};

use super::kernels::{self, Matrix};
use crate::engine::numerics::{KquantInputs, Storage};

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
    /// The value in f64 (for [`Shadowed`], the shadow's).
    fn wide(self) -> f64;
    /// `f` (a scalar function of [`crate::scalar`]) applied in f64 and brought back, as the
    /// engine applies it: for f32, `f(x as f64) as f32`.
    fn apply(self, f: fn(f64) -> f64) -> Self;
    /// `σ(x)`: [`crate::scalar::sigmoid`] applied as [`Real::apply`] applies it, except in the
    /// engine's f32, which computes its own `e^−|x|` ([`kernels::activation`]).
    fn sigmoid(self) -> Self {
        self.apply(crate::scalar::sigmoid)
    }
    /// `silu(x)`, as [`Real::sigmoid`] is `σ(x)`.
    fn silu(self) -> Self {
        self.apply(crate::scalar::silu)
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
    /// `Σ a[i]·b[i]` as [`super::matvec::dot`] computes it.
    fn dot<W: Copy>(a: &[W], b: &[Self]) -> Self
    where
        Self: From<W>,
    {
        super::matvec::lanes(a, b)
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
        if storage == Storage::F16 && crate::planted::is(crate::planted::Bug::EngineF16AsBf16) {
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
    /// misrounds values next to a tie): the shadow's own rounding.
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

/// A value of the engine (`lo`, f32, computed exactly as the f32 engine computes it) and its
/// shadow (`hi`, f64: the same operations in f64).
///
/// Where the engine stores below f32, both round, each with its own rounding (the engine's f32
/// one, the shadow's from f64). When they land on neighbouring values of the storage type and the
/// engine's is the correct nearest rounding of the engine's own value, the shadow takes the
/// engine's: the two differed only by f32 arithmetic near a rounding boundary, a flip whose
/// effect downstream is not an error of the engine. Any other difference stays, so an engine that
/// rounds to the wrong type, or rounds wrongly, separates from its shadow at its first store.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Shadowed {
    pub lo: f32,
    pub hi: f64,
}

impl Shadowed {
    fn zip(self, o: Shadowed, f: fn(f32, f32) -> f32, g: fn(f64, f64) -> f64) -> Shadowed {
        Shadowed { lo: f(self.lo, o.lo), hi: g(self.hi, o.hi) }
    }
}

impl From<f32> for Shadowed {
    #[inline(never)]
    fn from(x: f32) -> Shadowed {
        Shadowed { lo: x, hi: f64::from(x) }
    }
}

impl PartialOrd for Shadowed {
    #[inline(never)]
    fn partial_cmp(&self, other: &Shadowed) -> Option<Ordering> {
        self.lo.partial_cmp(&other.lo)
    }
}

impl Add for Shadowed {
    type Output = Shadowed;
    #[inline(never)]
    fn add(self, o: Shadowed) -> Shadowed {
        self.zip(o, |a, b| a + b, |a, b| a + b)
    }
}

impl Sub for Shadowed {
    type Output = Shadowed;
    #[inline(never)]
    fn sub(self, o: Shadowed) -> Shadowed {
        self.zip(o, |a, b| a - b, |a, b| a - b)
    }
}

impl Mul for Shadowed {
    type Output = Shadowed;
    #[inline(never)]
    fn mul(self, o: Shadowed) -> Shadowed {
        self.zip(o, |a, b| a * b, |a, b| a * b)
    }
}

impl Div for Shadowed {
    type Output = Shadowed;
    #[inline(never)]
    fn div(self, o: Shadowed) -> Shadowed {
        self.zip(o, |a, b| a / b, |a, b| a / b)
    }
}

impl Neg for Shadowed {
    type Output = Shadowed;
    #[inline(never)]
    fn neg(self) -> Shadowed {
        Shadowed { lo: -self.lo, hi: -self.hi }
    }
}

impl AddAssign for Shadowed {
    #[inline(never)]
    fn add_assign(&mut self, o: Shadowed) {
        *self = *self + o;
    }
}

impl MulAssign for Shadowed {
    #[inline(never)]
    fn mul_assign(&mut self, o: Shadowed) {
        *self = *self * o;
    }
}

impl Sum for Shadowed {
    /// In order from −0, as f32's and f64's `Sum` do.
    #[inline(never)]
    fn sum<I: Iterator<Item = Shadowed>>(iter: I) -> Shadowed {
        iter.fold(Shadowed { lo: -0.0, hi: -0.0 }, Add::add)
    }
}

/// The two operands of a [`Shadowed`] dot product split into their engine's and shadow's halves:
/// buffers each thread keeps and refills, so that a dot product (one per row of a matvec)
/// allocates nothing.
#[derive(Default)]
struct Halves {
    a_lo: Vec<f32>,
    a_hi: Vec<f64>,
    b_lo: Vec<f32>,
    b_hi: Vec<f64>,
}

impl Halves {
    /// Holds the halves of `a` and `b` (of one length), and nothing else.
    fn fill(&mut self, a: impl Iterator<Item = Shadowed>, b: &[Shadowed]) {
        for v in [&mut self.a_lo, &mut self.b_lo] {
            v.clear();
        }
        for v in [&mut self.a_hi, &mut self.b_hi] {
            v.clear();
        }
        for x in a {
            self.a_lo.push(x.lo);
            self.a_hi.push(x.hi);
        }
        for x in b {
            self.b_lo.push(x.lo);
            self.b_hi.push(x.hi);
        }
    }
}

thread_local! {
    /// This thread's [`Halves`].
    static HALVES: std::cell::RefCell<Halves> = std::cell::RefCell::new(Halves::default());
}

// The pair's operations are not inlined: inlined, LLVM 22 (rustc 1.95) crashes compiling the
// units over the pair (SIGSEGV in SelectionDAG::getNode). The shadow's run is the check's, not
// the engine's, so its speed matters little.
impl Real for Shadowed {
    /// The engine's dot product on the engine's values and the shadow's on the shadow's, each
    /// in [`super::matvec::lanes`]'s order (LLVM 22 crashes compiling that loop over the pair).
    #[inline(never)]
    fn dot<W: Copy>(a: &[W], b: &[Shadowed]) -> Shadowed
    where
        Shadowed: From<W>,
    {
        let n = a.len().min(b.len());
        HALVES.with_borrow_mut(|h| {
            h.fill(a[..n].iter().map(|&x| Shadowed::from(x)), &b[..n]);
            Shadowed { lo: super::matvec::lanes(&h.a_lo, &h.b_lo), hi: super::matvec::lanes(&h.a_hi, &h.b_hi) }
        })
    }

    /// The engine's matvec (its kernels) on the engine's values, and the shadow's (each row's
    /// exact dequantized values, in f64) on the shadow's: the engine's half is the f32 engine's
    /// own arithmetic.
    ///
    /// Where the matrix reads its input quantized to Q8_K, the shadow quantizes its own values,
    /// taking the engine's integer only at a flip (`q8k_rule::shadow_values`).
    #[inline(never)]
    fn matvec(m: &Matrix, x: &[Shadowed], out: &mut [Shadowed], threads: usize) {
        let (lo, hi): (Vec<f32>, Vec<f64>) = x.iter().map(|v| (v.lo, v.hi)).unzip();
        let (mut out_lo, mut out_hi) = (vec![0f32; out.len()], vec![0f64; out.len()]);
        f32::matvec(m, &lo, &mut out_lo, threads);
        if m.quantizes_inputs() {
            let hi = super::q8k_rule::shadow_values(&lo, &hi);
            f64::matvec(&m.with_inputs(KquantInputs::F32), &hi, &mut out_hi, threads);
        } else {
            f64::matvec(m, &hi, &mut out_hi, threads);
        }
        for ((o, lo), hi) in out.iter_mut().zip(out_lo).zip(out_hi) {
            *o = Shadowed { lo, hi };
        }
    }
    #[inline(never)]
    fn of(x: f64) -> Shadowed {
        Shadowed { lo: x as f32, hi: x }
    }
    #[inline(never)]
    fn wide(self) -> f64 {
        self.hi
    }
    #[inline(never)]
    fn apply(self, f: fn(f64) -> f64) -> Shadowed {
        Shadowed { lo: self.lo.apply(f), hi: f(self.hi) }
    }
    #[inline(never)]
    fn sigmoid(self) -> Shadowed {
        Shadowed { lo: self.lo.sigmoid(), hi: crate::scalar::sigmoid(self.hi) }
    }
    #[inline(never)]
    fn silu(self) -> Shadowed {
        Shadowed { lo: self.lo.silu(), hi: crate::scalar::silu(self.hi) }
    }
    #[inline(never)]
    fn sqrt(self) -> Shadowed {
        Shadowed { lo: self.lo.sqrt(), hi: self.hi.sqrt() }
    }
    #[inline(never)]
    fn exp(self) -> Shadowed {
        Shadowed { lo: self.lo.exp(), hi: self.hi.exp() }
    }
    #[inline(never)]
    fn max(self, o: Shadowed) -> Shadowed {
        Shadowed { lo: self.lo.max(o.lo), hi: self.hi.max(o.hi) }
    }
    const NEG_INFINITY: Shadowed = Shadowed { lo: f32::NEG_INFINITY, hi: f64::NEG_INFINITY };
    #[inline(never)]
    fn round_to(self, storage: Storage) -> Shadowed {
        let lo = self.lo.round_to(storage);
        let mut hi = self.hi.round_to(storage);
        let engines = f64::from(lo);
        if engines != hi {
            let correct = f64::from(self.lo).round_to(storage) == engines;
            let neighbours = (engines - hi).abs() <= 2.0 * storage.unit_roundoff() * engines.abs().max(hi.abs());
            if correct && neighbours {
                hi = engines;
            }
        }
        Shadowed { lo, hi }
    }
}

/// An f64 value each of whose operations is moved, after it, by one f32 unit roundoff (2⁻²⁴) up
/// or down (a sign drawn from the result's own bits): a model of f32 arithmetic, whose every
/// operation rounds by at most that. Its run's distance from the exact run bounds, within a
/// margin, what f32 arithmetic does to the program, inside units too (`check::tolerance`).
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Noisy(pub f64);

impl Noisy {
    #[inline]
    fn moved(x: f64) -> Noisy {
        Noisy(modelled(x))
    }
}

/// `x` moved by one f32 unit roundoff (2⁻²⁴), up (`x·(1 + 2⁻²⁴)`) when the top bit of its bits
/// times a golden-ratio constant is clear, down (`x·(1 − 2⁻²⁴)`) when it is set: the f32-arithmetic
/// model of [`Noisy`] and [`Rounding::Model`]. The factor is picked by that bit as an index, not a
/// branch: once per operation of a modelled run, a branch here was its hottest comparison (and,
/// in the fuzz build, a traced one).
#[inline]
fn modelled(x: f64) -> f64 {
    let bits = x.to_bits().wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let u = Storage::F32.unit_roundoff();
    x * [1.0 + u, 1.0 - u][(bits >> 63) as usize]
}

impl From<f32> for Noisy {
    fn from(x: f32) -> Noisy {
        Noisy(f64::from(x))
    }
}

impl Add for Noisy {
    type Output = Noisy;
    fn add(self, o: Noisy) -> Noisy {
        Noisy::moved(self.0 + o.0)
    }
}

impl Sub for Noisy {
    type Output = Noisy;
    fn sub(self, o: Noisy) -> Noisy {
        Noisy::moved(self.0 - o.0)
    }
}

impl Mul for Noisy {
    type Output = Noisy;
    fn mul(self, o: Noisy) -> Noisy {
        Noisy::moved(self.0 * o.0)
    }
}

impl Div for Noisy {
    type Output = Noisy;
    fn div(self, o: Noisy) -> Noisy {
        Noisy::moved(self.0 / o.0)
    }
}

impl Neg for Noisy {
    type Output = Noisy;
    fn neg(self) -> Noisy {
        Noisy(-self.0)
    }
}

impl AddAssign for Noisy {
    fn add_assign(&mut self, o: Noisy) {
        *self = *self + o;
    }
}

impl MulAssign for Noisy {
    fn mul_assign(&mut self, o: Noisy) {
        *self = *self * o;
    }
}

impl Sum for Noisy {
    fn sum<I: Iterator<Item = Noisy>>(iter: I) -> Noisy {
        iter.fold(Noisy(-0.0), Add::add)
    }
}

impl Real for Noisy {
    fn of(x: f64) -> Noisy {
        Noisy(x)
    }
    fn wide(self) -> f64 {
        self.0
    }
    fn apply(self, f: fn(f64) -> f64) -> Noisy {
        Noisy::moved(f(self.0))
    }
    fn sqrt(self) -> Noisy {
        Noisy::moved(self.0.sqrt())
    }
    fn exp(self) -> Noisy {
        Noisy::moved(self.0.exp())
    }
    fn max(self, o: Noisy) -> Noisy {
        Noisy(self.0.max(o.0))
    }
    const NEG_INFINITY: Noisy = Noisy(f64::NEG_INFINITY);
    fn round_to(self, storage: Storage) -> Noisy {
        Noisy(self.0.round_to(storage))
    }
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
    /// Keeps it as computed, moved by one f32 unit roundoff (2⁻²⁴) up or down, by a sign drawn
    /// from the value's own bits: a model of the f32 arithmetic that produced it, whose effect
    /// on the output bounds what f32 arithmetic can do to the exact structure
    /// (`check::tolerance`).
    Model,
    /// As [`Rounding::Model`], then rounded to its storage as [`Rounding::Stored`] does: every
    /// value at or next to a rounding boundary of a reduced type may land on either side, as f32
    /// arithmetic can make it land. Its effect bounds what such flips can do (`check::tolerance`).
    ModelStored,
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
            Rounding::Model => R::of(modelled(x.wide())),
            Rounding::ModelStored => {
                Keep { storage: self.storage, rounding: Rounding::Model }.keep(x).round_to(self.storage)
            }
        }
    }

    /// Every value of `out` as it is kept.
    pub fn keep_all<R: Real>(self, out: &mut [R]) {
        if self.rounding == Rounding::Stored && self.storage == Storage::F32 {
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
        let moved = Keep { storage: Storage::Bf16, rounding: Rounding::Model }.keep(x);
        assert!((((moved - x) / x).abs() - 2f64.powi(-24)).abs() < 1e-12, "one f32 unit roundoff: {moved}");
    }

    #[test]
    fn the_shadows_rounding_is_the_nearest_value_of_the_type() {
        // Every f32 bit pattern class near ties and range ends, against half's rounding from f32
        // (correct for f32 inputs).
        let mut bits = 0x3f80_0000u32;
        for _ in 0..200_000 {
            bits = bits.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let x = f32::from_bits(bits);
            if !x.is_finite() {
                continue;
            }
            let w = f64::from(x);
            assert_eq!(w.round_to(Storage::Bf16), f64::from(half::bf16::from_f32(x).to_f32()), "bf16 {x:e}");
            assert_eq!(w.round_to(Storage::F16), f64::from(half::f16::from_f32(x).to_f32()), "f16 {x:e}");
        }
    }

    #[test]
    fn the_shadow_takes_the_engines_rounding_only_at_a_flip() {
        let bf16_ulp = 2f64.powi(-7);
        let tie = 1.0 + bf16_ulp / 2.0;
        // (engine's value, shadow's value, shadow kept): a tie the engine's f32 value sits just
        // above while the shadow's sits just below is a flip; a shadow two ulps away is not.
        let cases = [
            (tie as f32 + f32::EPSILON, tie - 1e-12, 1.0 + bf16_ulp),
            (tie as f32, tie, 1.0),
            (1.0 + 2.0 * bf16_ulp as f32, 1.0, 1.0),
        ];
        for (lo, hi, want) in cases {
            let kept = Shadowed { lo, hi }.round_to(Storage::Bf16);
            assert_eq!(kept.hi, want, "{lo} {hi}");
        }
    }
}
