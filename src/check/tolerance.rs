//! How far the engine may be from the reference: one place, with the reasoning.
//!
//! A tensor is compared as a whole: a value agrees when `|a − b| ≤ tol · scale`, where
//! `scale = max(1, max |b|)` over the tensor it is judged against, so that a logit near zero is
//! judged on the tensor's scale, not its own. Every comparison judges its *worst* value: the
//! witness of a disagreement is the value furthest out of tolerance, never the first.
//!
//! The check splits what it judges in two, so that no tolerance has to cover both a wrong program
//! and the rounding of a right one:
//!
//! 1. **Structure** ([`EXACT`]). The engine's own units run over f64 with every stored value kept
//!    exactly ([`crate::engine::run::Rounding::Exact`]) and are compared with the reference, which
//!    computes in f64 from the same f32 weights. The two differ only in the order of f64
//!    operations: about `n·2⁻⁵³` per dot product of `n` terms, amplified by the graph's
//!    conditioning. The generated tiny heads that amplify one f32 ulp by 10³ (a gated norm over two
//!    values) amplify one f64 ulp by as much, about 10⁻¹³ of the scale; `EXACT` = 10⁻⁹ sits four
//!    orders above that and five below the smallest error of a wrong program the gate has seen
//!    (an eps fixed at 10⁻⁵ instead of 10⁻⁶ under a norm of unit mean square moves it by 5·10⁻⁶).
//!    Nothing excuses a structural disagreement: it is a wrong program, whatever the conditioning.
//! 2. **Numerics** ([`tolerance`]). The engine as it runs (f32 arithmetic, the program's storage
//!    types) is compared with the exact run, in the engine's own layouts. What may separate them
//!    is rounding: of f32 arithmetic everywhere, and of the values stored below f32 where the
//!    program's `Numerics` say. Its bound is measured on the engine's structure, not guessed: the
//!    units run once more over f64 with every stored value moved by one unit roundoff of *its*
//!    storage type, up or down ([`crate::engine::run::Rounding::Model`]) — 2⁻²⁴ where it is f32
//!    (standing for the f32 arithmetic that produced it), 2⁻⁸ or 2⁻¹¹ only where that value is
//!    bf16 or f16. Only what the numerics reduce is moved by a reduced type's roundoff: a bf16 KV
//!    cache alone moves only the cache. The largest change this makes, relative to each tensor's
//!    scale, times [`MARGIN`], is the tolerance, with a floor of [`F32`] for the f32 arithmetic
//!    inside a unit that no store shows. Rounding to nearest moves a value by at most the unit
//!    roundoff, and on average by half of it, so an engine that rounds where it says stays well
//!    inside; one that rounds f16 values as bf16 (eight times the roundoff) does not.
//!    When the tolerance this gives exceeds [`LIMIT`] of the scale, rounding alone can move the
//!    output by as much as a wrong program would: the numerics are inconclusive (and said so,
//!    counted per numerics). The structure was judged exactly first, so an inconclusive here never
//!    stands for a value that is wrong at f64.

/// The tolerance of the structural comparison: the engine's units over f64, every stored value
/// kept exactly, against the reference; relative to the scale of each compared tensor.
pub const EXACT: f64 = 1e-9;

/// The floor of the numerics tolerance: f32 arithmetic inside a unit, which no store shows
/// (measured errors on the presets and fixtures stay below 1.1e-5 of the scale).
pub const F32: f64 = 1e-4;

/// How many times the rounding model's effect the engine may be off its exact run.
pub const MARGIN: f64 = 4.0;

/// The largest numerics tolerance, relative to the scale, that still judges anything: beyond it
/// rounding alone moves the output as far as a wrong program does, and the numerics comparison is
/// inconclusive.
pub const LIMIT: f64 = 0.1;

/// The numerics tolerance given the rounding model's largest relative effect on the output.
pub fn tolerance(model_effect: f64) -> f64 {
    F32.max(MARGIN * model_effect)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_numerics_tolerance_is_the_models_effect_times_the_margin_above_the_f32_floor() {
        // (the model's effect, the tolerance)
        for (effect, want) in [(0.0, F32), (1e-9, F32), (0.01, 0.04), (1.0, 4.0)] {
            assert_eq!(tolerance(effect), want, "{effect}");
        }
        const { assert!(EXACT * 1e4 < F32 && F32 < LIMIT) };
    }
}
