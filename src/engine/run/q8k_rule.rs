//! The Q8_K input rule ([`KquantInputs::Q8K`](crate::engine::numerics::KquantInputs::Q8K)) as the check's arithmetics apply it: written here
//! again, apart from the engine's kernels (`kernels::q8k`), which keep `q` and `d` apart and sum
//! in integers.
//!
//! A block of 256 values `x` with `a = max |x|` is held as `d · q`, `q = round_half_even(x · (127 /
//! a))`, `d = a / 127` (zeros when `a` is 0, NaN when a value is not finite). `x · (127 / a)` stays
//! within ±127.5 in f32 and above, so no `q` needs clamping.

use super::real::Real;

/// Values per block.
const BLOCK: usize = 256;

/// The most the engine's scaled value `x · (127 / a)` and the shadow's may differ, in steps of the
/// quantization, for the shadow to take the engine's integer where the two round to neighbours
/// ([`shadow_values`]): f32 arithmetic moves a value by a few units of 2⁻²⁴, so a genuine flip
/// at a rounding boundary differs by far less than this; an error of the engine's input larger
/// than 1/64 of a step is never taken.
pub const FLIP_WINDOW: f64 = 1.0 / 64.0;

/// `x` as the rule holds it, in `R`: the rule over any arithmetic, for the runs that
/// are not the engine's own (the exact structure never quantizes; the f32 model's flips run does).
pub fn q8k_values<R: Real>(x: &[R]) -> Vec<R> {
    let zero = R::default();
    let mut out = Vec::with_capacity(x.len());
    for block in x.chunks(BLOCK) {
        let a = block.iter().fold(zero, |a, &v| a.max(if v < zero { -v } else { v }));
        if !block.iter().all(|v| v.wide().is_finite()) {
            out.extend(block.iter().map(|_| R::of(f64::NAN)));
        } else if a == zero {
            out.extend(block.iter().map(|_| zero));
        } else {
            let (scale, d) = (R::from(127.0) / a, a / R::from(127.0));
            out.extend(block.iter().map(|&v| (v * scale).apply(f64::round_ties_even) * d));
        }
    }
    out
}

/// The shadow's quantized input (f64 `d · q`, from the shadow's values `hi`), beside the engine's
/// values `lo`: each `q` is the shadow's own, except where the rule applied in f32 to the engine's
/// value gives a neighbouring integer and the two scaled values are within [`FLIP_WINDOW`] of a
/// step of each other. Then the shadow takes that integer: the two straddle a rounding boundary by
/// f32 arithmetic alone, as a store's flip does (`Shadowed::round_to`), and the flip's effect
/// downstream is not an error of the engine. The integer taken is the rule's on the engine's
/// value, never the kernel's own, so a kernel that quantizes otherwise still separates.
pub fn shadow_values(lo: &[f32], hi: &[f64]) -> Vec<f64> {
    let mut out = q8k_values(hi);
    for ((lo, hi), out) in lo.chunks(BLOCK).zip(hi.chunks(BLOCK)).zip(out.chunks_mut(BLOCK)) {
        let (a_lo, a_hi) = (lo.iter().fold(0f32, |a, x| a.max(x.abs())), hi.iter().fold(0f64, |a, x| a.max(x.abs())));
        let finite = lo.iter().all(|x| x.is_finite()) && hi.iter().all(|x| x.is_finite());
        if !finite || a_lo == 0.0 || a_hi == 0.0 {
            continue;
        }
        let (scale_lo, scale_hi, d) = (127.0 / a_lo, 127.0 / a_hi, a_hi / 127.0);
        for ((&lo, &hi), out) in lo.iter().zip(hi).zip(out.iter_mut()) {
            let (t_lo, t_hi) = (f64::from(lo * scale_lo), hi * scale_hi);
            let (q_lo, q_hi) = (t_lo.round_ties_even(), t_hi.round_ties_even());
            if (q_lo - q_hi).abs() == 1.0 && (t_lo - t_hi).abs() <= FLIP_WINDOW {
                *out = q_lo * d;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block whose largest value is 127 (so a step is 1 and `x` is its own scaled value), with
    /// the engine's and the shadow's value of its first entry set apart.
    fn block(lo: f32, hi: f64) -> (Vec<f32>, Vec<f64>) {
        let mut lo_block = vec![0f32; BLOCK];
        let mut hi_block = vec![0f64; BLOCK];
        (lo_block[1], hi_block[1]) = (127.0, 127.0);
        (lo_block[0], hi_block[0]) = (lo, hi);
        (lo_block, hi_block)
    }

    #[test]
    fn the_shadow_takes_the_engines_integer_only_at_a_flip_within_the_window() {
        // (engine's value, shadow's value, the shadow's integer): a tie's two sides a hair apart
        // is a flip (taken); a sixteenth of a step apart is beyond the window (kept); the same
        // integer needs nothing; integers two apart are never neighbours.
        let cases = [
            (10.499_999, 10.500_001, 10.0),
            (10.500_001, 10.499_999, 11.0),
            (10.45, 10.5 + 1e-9, 11.0),
            (10.2, 10.3, 10.0),
            (9.4, 11.6, 12.0),
        ];
        for (lo, hi, want) in cases {
            let (lo_block, hi_block) = block(lo, hi);
            let got = shadow_values(&lo_block, &hi_block)[0];
            assert_eq!(got, want, "engine {lo}, shadow {hi}");
        }
    }

    #[test]
    fn the_rule_holds_a_block_as_d_times_q_with_zeros_and_nan_as_stated() {
        let (_, hi) = block(-63.25, -63.25);
        let v = q8k_values(&hi);
        assert_eq!((v[0], v[1], v[2]), (-63.0, 127.0, 0.0));
        assert!(q8k_values(&[0f64; BLOCK]).iter().all(|&x| x == 0.0));
        let mut bad = vec![1f64; BLOCK];
        bad[7] = f64::INFINITY;
        assert!(q8k_values(&bad).iter().all(|x| x.is_nan()));
    }
}
