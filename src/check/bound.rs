//! A value the check computes with the bound of its error: what an f32 evaluation of a Command's
//! documented meaning may give, derived before looking at what the engine gave.
//!
//! A [`Ball`] is a midpoint, computed in f64 from the engine's own inputs, and a radius: every
//! value an engine that follows the Command's documented arithmetic in f32 can compute lies within
//! `radius` of `midpoint`. The rules, each an instance of the standard model of floating-point
//! arithmetic (`fl(x ∘ y) = (x ∘ y)(1 + δ)`, `|δ| ≤ u`, plus an absolute `η` below f32's normal
//! range; Higham, *Accuracy and Stability of Numerical Algorithms*, §2.2, §3.1):
//!
//! - **One rounded operation** on inputs within their balls: the exact operation's deviation over
//!   the balls (`err`, the operation's own rule below) plus its rounding, `u · (|mid| + err) + η`.
//! - **Add, subtract**: `err = r_a + r_b`. **Multiply**: `err = |a|·r_b + |b|·r_a + r_a·r_b`.
//!   **Divide** (the divisor's ball excludes 0): `err = (r_a·|b| + |a|·r_b) / (|b|·(|b| − r_b))`.
//!   **Square root**: the largest change of `√` over the ball.
//! - **A sum of `n` terms in any order** (any tree of additions, the SIMD lanes' included):
//!   `Σ r_i + γ_{n−1} · Σ (|m_i| + r_i)`, `γ_k = k·u / (1 − k·u)` (Higham, Lemma 3.1 and §4.2).
//! - **A dot product of `n` terms** `Σ w_i x_i`, each product rounded or fused, summed in any
//!   order: the products' deviation plus `γ_{n+k} · Σ |w_i|·(|x_i| + r_i)`. The `k` extra roundings
//!   cover a kernel that factors a block's scale out of its sum (Q8_0: one product by `d` per
//!   block, one level of sums more) — [`DOT_EXTRA`] — and, for k-quant rows against Q8_K inputs,
//!   the scale products and the integer sums' conversion to f32 ([`Q8K_EXTRA`], docs/SOUNDNESS.md).
//! - **An elementwise function** `f` (e^x, σ, SiLU, softplus): `L · r` over the ball, `L` the
//!   largest `|f'|` there, plus the engine's function error, at most [`FUNCTION`] relative (one
//!   f32 unit in the last place) and `η`.
//!
//! Every rule also covers the check's own f64 evaluation of the midpoint: the unit it adds per
//! operation is `u + 2⁻⁵²`, not `u`, and each radius is rounded up by a factor `1 + 2⁻⁵⁰`. A ball
//! whose midpoint or radius is not finite bounds nothing; the check calls it inconclusive.

use std::ops::{Add, Div, Mul, Sub};

/// f32's unit roundoff, `u = 2⁻²⁴`: an f32 operation's result is within `u` of the exact one,
/// relatively, in the normal range.
pub const U: f64 = 1.0 / 16_777_216.0;

/// The least positive subnormal f32, `2⁻¹⁴⁹`: a bound of the absolute error one f32 rounding adds
/// below the normal range, where it rounds to a multiple of it.
pub(crate) const ETA: f64 = 1.401_298_464_324_817e-45;

/// The unit each rule adds per operation: f32's `u` and the check's own f64 rounding of the
/// midpoint (`2⁻⁵²`, two f64 half-units).
const UNIT: f64 = U + 1.0 / 4_503_599_627_370_496.0;

/// Each radius is rounded up by this factor, for the f64 rounding of the radius's own arithmetic.
const UP: f64 = 1.0 + 1.0 / 1_125_899_906_842_624.0;

/// The accuracy the engine's elementwise functions are held to, relative: one f32 unit in the last
/// place (`2u`). The engine's e^x is the platform's `expf` (within one unit), its σ and SiLU are
/// f64 formulas rounded once (within half a unit, `kernels::activation`), softplus is
/// `crate::scalar::softplus` in f64 rounded once; `check::bound`'s tests hold each to it.
pub(crate) const FUNCTION: f64 = 2.0 * U;

/// The roundings a matvec row's dot product may have beyond its `n` products and sums: Q8_0's
/// SIMD path multiplies each block's sum by the block's `d` (one more), and sums the blocks'
/// products after their inner sums (a tree at most `32 + n/32` high, never above `n + 2`).
pub(crate) const DOT_EXTRA: usize = 2;

/// The roundings, beyond `n`, of a Q4_K, Q5_K or Q6_K row against its input quantized to Q8_K:
/// `d · dₓ` and `dmin · dₓ`, each integer sum's conversion to f32, the two products and their
/// difference (six), and the weights' own decoding, whose f32 value (`d·scale·q − dmin·min`,
/// four roundings) the check reads in place of the exact one the integer sums use (four more on
/// the magnitudes [`dot_exact`] is given).
pub(crate) const Q8K_EXTRA: usize = 10;

/// `γ_n = n·u' / (1 − n·u')` with the check's unit `u'`: the bound of `n` roundings in a row,
/// relative; infinite where `n·u'` reaches 1/2.
pub fn gamma(n: usize) -> f64 {
    let nu = n as f64 * UNIT;
    if nu < 0.5 { nu / (1.0 - nu) * UP } else { f64::INFINITY }
}

/// A value and the bound of its error: every value an f32 evaluation can give lies in
/// `[mid − rad, mid + rad]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Ball {
    pub mid: f64,
    pub rad: f64,
}

impl Ball {
    /// A value known exactly: an input the engine holds (an f32 buffer value, a decoded weight).
    pub fn exact(x: f64) -> Ball {
        Ball { mid: x, rad: 0.0 }
    }

    /// A constant of the program (an eps, a scale) as the engine holds it: in f32, within `u` of
    /// the program's f64 value.
    pub(crate) fn f32_constant(x: f64) -> Ball {
        Ball { mid: x, rad: (UNIT * x.abs() + ETA) * UP }
    }

    /// The result `mid` of one rounded operation whose exact value may deviate by `err` over its
    /// inputs' balls.
    fn rounded(mid: f64, err: f64) -> Ball {
        Ball { mid, rad: (err * (1.0 + UNIT) + UNIT * mid.abs() + ETA) * UP }
    }

    /// The result `mid` of one of the engine's elementwise functions whose exact value may deviate
    /// by `err` over its input's ball.
    fn function(mid: f64, err: f64) -> Ball {
        Ball { mid, rad: (err * (1.0 + FUNCTION + UNIT) + (FUNCTION + UNIT) * mid.abs() + ETA) * UP }
    }

    /// The smallest value within the bound.
    pub fn lo(self) -> f64 {
        self.mid - self.rad
    }

    /// The largest value within the bound.
    pub fn hi(self) -> f64 {
        self.mid + self.rad
    }

    /// Whether the ball bounds anything: its midpoint and radius are finite.
    pub fn is_finite(self) -> bool {
        self.mid.is_finite() && self.rad.is_finite()
    }

    /// `√self`; not finite when the ball lies below 0.
    pub fn sqrt(self) -> Ball {
        let (lo, hi) = (self.lo().max(0.0), self.hi());
        if hi < 0.0 {
            return Ball { mid: f64::NAN, rad: f64::INFINITY };
        }
        let mid = self.mid.max(0.0).sqrt();
        Ball::rounded(mid, (mid - lo.sqrt()).max(hi.sqrt() - mid))
    }

    /// `e^self`, the engine's function.
    pub fn exp(self) -> Ball {
        let mid = self.mid.exp();
        Ball::function(mid, mid * self.rad.exp_m1())
    }

    /// `σ(self)`, the engine's function.
    pub fn sigmoid(self) -> Ball {
        let t = 0f64.clamp(self.lo(), self.hi());
        let s = crate::scalar::sigmoid(t);
        Ball::function(crate::scalar::sigmoid(self.mid), s * (1.0 - s) * self.rad)
    }

    /// `silu(self) = self · σ(self)`, the engine's function; `|silu'| < 1.1` everywhere.
    pub fn silu(self) -> Ball {
        Ball::function(crate::scalar::silu(self.mid), 1.1 * self.rad)
    }

    /// `softplus(self)`, the engine's function (`x` above 20); its slope is at most
    /// `max(σ(hi), 1)` over the ball, 1 above 20.
    pub fn softplus(self) -> Ball {
        let slope = if self.hi() > 20.0 { 1.0 } else { crate::scalar::sigmoid(self.hi()) };
        Ball::function(crate::scalar::softplus(self.mid), slope * self.rad)
    }
}

impl Add for Ball {
    type Output = Ball;
    fn add(self, o: Ball) -> Ball {
        Ball::rounded(self.mid + o.mid, self.rad + o.rad)
    }
}

impl Sub for Ball {
    type Output = Ball;
    fn sub(self, o: Ball) -> Ball {
        Ball::rounded(self.mid - o.mid, self.rad + o.rad)
    }
}

impl Mul for Ball {
    type Output = Ball;
    fn mul(self, o: Ball) -> Ball {
        let err = self.mid.abs() * o.rad + o.mid.abs() * self.rad + self.rad * o.rad;
        Ball::rounded(self.mid * o.mid, err)
    }
}

impl Div for Ball {
    type Output = Ball;
    /// `self / o`; infinite when `o`'s ball holds 0.
    fn div(self, o: Ball) -> Ball {
        let (b, rb) = (o.mid.abs(), o.rad);
        if b <= rb {
            return Ball { mid: self.mid / o.mid, rad: f64::INFINITY };
        }
        let err = (self.rad * b + self.mid.abs() * rb) / (b * (b - rb));
        Ball::rounded(self.mid / o.mid, err)
    }
}

/// The sum of `terms` in any order.
pub fn sum(terms: &[Ball]) -> Ball {
    let (mut mid, mut rad, mut size) = (0.0, 0.0, 0.0);
    for t in terms {
        mid += t.mid;
        rad += t.rad;
        size += t.mid.abs() + t.rad;
    }
    let n = terms.len();
    Ball { mid, rad: (rad + gamma(n.saturating_sub(1)) * size + n as f64 * ETA) * UP }
}

/// `Σ w_i · x_i` over exact weights `w` and the balls `x`, products rounded or fused and summed in
/// any order, with `extra` roundings more (see the module documentation). `magnitude`, when given,
/// bounds each weight's size in the arithmetic that reads it (`|w_i|` otherwise): a k-quant value
/// `d·scale·q − dmin·min` whose engine sums the two products apart is as large as `|d·scale·q| +
/// |dmin·min|` there.
pub(crate) fn dot_exact<W: Copy + Into<f64>>(w: &[W], x: &[Ball], magnitude: Option<&[f64]>, extra: usize) -> Ball {
    let (mut mid, mut spread, mut size) = (0.0, 0.0, 0.0);
    for (i, (&wi, xi)) in w.iter().zip(x).enumerate() {
        let wi: f64 = wi.into();
        mid += wi * xi.mid;
        spread += wi.abs() * xi.rad;
        let m = magnitude.map_or(wi.abs(), |m| m[i]);
        size += m * (xi.mid.abs() + xi.rad);
    }
    let n = w.len().min(x.len());
    Ball { mid, rad: (spread + gamma(n + extra) * size + n as f64 * ETA) * UP }
}

/// `Σ a_i · b_i` over two vectors of balls, products rounded or fused, summed in any order.
pub fn dot(a: &[Ball], b: &[Ball]) -> Ball {
    let (mut mid, mut spread, mut size) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        mid += x.mid * y.mid;
        let e = x.mid.abs() * y.rad + y.mid.abs() * x.rad + x.rad * y.rad;
        spread += e;
        size += (x.mid * y.mid).abs() + e;
    }
    let n = a.len().min(b.len());
    Ball { mid, rad: (spread + gamma(n) * size + n as f64 * ETA) * UP }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::run::kernels::activation;

    /// A deterministic stream of f32 values spread over many binades, both signs.
    fn values(n: usize, spread: f64) -> impl Iterator<Item = f32> {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        (0..n).map(move |_| {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let unit = (s >> 11) as f64 / (1u64 << 53) as f64;
            ((unit * 2.0 - 1.0) * spread) as f32
        })
    }

    #[test]
    fn an_operation_on_f32_values_rounded_in_f32_lies_in_its_ball() {
        // Every f32 result of an operation on f32 inputs (exact balls) is within the ball the rule
        // gives: the rule covers one rounding.
        let xs: Vec<f32> = values(20_000, 1e3).collect();
        for w in xs.windows(2) {
            let (a, b) = (w[0], w[1]);
            let (x, y) = (Ball::exact(f64::from(a)), Ball::exact(f64::from(b)));
            for (got, ball) in [(a + b, x + y), (a - b, x - y), (a * b, x * y), (a / b, x / y)] {
                let g = f64::from(got);
                assert!(ball.lo() <= g && g <= ball.hi(), "{a} {b}: {g} outside {ball:?}");
            }
            let root = Ball::exact(f64::from(a.abs())).sqrt();
            assert!((root.mid - f64::from(a.abs().sqrt())).abs() <= root.rad);
        }
    }

    #[test]
    fn the_engines_functions_lie_in_their_balls() {
        // The engine's e^x, σ and SiLU (and softplus, f64 rounded once) on exact inputs: within
        // FUNCTION of the exact value, the accuracy the check holds them to.
        for x in values(200_000, 60.0) {
            let b = Ball::exact(f64::from(x));
            let cases = [
                ("exp", x.exp(), b.exp()),
                ("sigmoid", activation::sigmoid(x), b.sigmoid()),
                ("silu", activation::silu(x), b.silu()),
                ("softplus", crate::scalar::softplus(f64::from(x)) as f32, b.softplus()),
            ];
            for (name, got, ball) in cases {
                let g = f64::from(got);
                if ball.mid.is_finite() {
                    assert!((g - ball.mid).abs() <= ball.rad, "{name}({x}) = {g}, ball {ball:?}");
                }
            }
        }
    }

    #[test]
    fn a_sum_in_any_order_lies_in_its_ball() {
        // The same 1,000 values summed forwards, backwards and pairwise in f32: each within the
        // ball of the sum, which covers every order.
        let xs: Vec<f32> = values(1_000, 1e4).collect();
        let ball = sum(&xs.iter().map(|&x| Ball::exact(f64::from(x))).collect::<Vec<_>>());
        let forwards: f32 = xs.iter().sum();
        let backwards: f32 = xs.iter().rev().sum();
        fn pairwise(x: &[f32]) -> f32 {
            if x.len() == 1 { x[0] } else { pairwise(&x[..x.len() / 2]) + pairwise(&x[x.len() / 2..]) }
        }
        for got in [forwards, backwards, pairwise(&xs)] {
            assert!((f64::from(got) - ball.mid).abs() <= ball.rad, "{got} outside {ball:?}");
        }
        // And the bound is not vacuous: a sum missing its last term is outside it.
        let short: f32 = xs[..999].iter().sum();
        assert!((f64::from(short) - ball.mid).abs() > ball.rad);
    }

    #[test]
    fn a_ball_input_carries_its_radius_through_each_rule() {
        let a = Ball { mid: 2.0, rad: 0.5 };
        let b = Ball { mid: -4.0, rad: 1.0 };
        // (rule, the exact deviation the ball must cover at a corner of the inputs)
        let corners = [
            (a + b, (2.5 + -3.0) - (2.0 + -4.0)),
            (a * b, (2.5 * -5.0) - (2.0 * -4.0)),
            (a / b, (2.5 / -3.0) - (2.0 / -4.0)),
            (a.exp(), 2.5f64.exp() - 2f64.exp()),
        ];
        for (ball, deviation) in corners {
            assert!(ball.rad >= deviation.abs(), "{ball:?} does not cover {deviation}");
        }
        assert!(!(Ball::exact(1.0) / Ball { mid: 0.1, rad: 0.2 }).is_finite(), "a divisor's ball holding 0");
    }
}
