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
//!    types) is compared with its shadow ([`crate::engine::run::Shadowed`]: the same units, each
//!    f32 value computed beside its f64 counterpart), in the engine's layouts. Where the program
//!    stores below f32, engine and shadow each round with their own rounding; when they land on
//!    neighbouring values and the engine's is the correct rounding of its own value, the shadow
//!    takes it (a flip of f32 arithmetic at a rounding boundary, not an error). So the two differ
//!    by f32 arithmetic alone, and by more only where the engine rounds wrongly: f16 values
//!    rounded as bf16 are several f16 ulps off at their first store. What f32 arithmetic can do is
//!    measured on the exact structure, not guessed: the units run over
//!    [`crate::engine::run::Noisy`] (f64, every operation and every store moved by 2⁻²⁴, the most
//!    an f32 operation rounds), and the largest change this makes relative to each tensor's scale,
//!    times [`MARGIN`], is the tolerance, with a floor of [`F32`]. It follows the graph's
//!    conditioning (a gated norm over two values amplifies f32 rounding hundreds of times) without
//!    excusing anything structural, which the first comparison judged exactly. The model runs only
//!    when a value of the engine is off its shadow beyond the floor: within it, the engine agrees
//!    at every tolerance the model could measure, and agreement within the floor is the stronger
//!    statement, so the verdict is agreement at the floor.
//!    Three reasons leave it inconclusive, counted per numerics: the engine is off its shadow
//!    beyond the floor and the tolerance exceeds [`LIMIT`] of the scale (rounding alone moves the
//!    output as far as a wrong program would); at reduced storage the engine is off its shadow
//!    beyond the tolerance but within [`MARGIN`] times what flips do (a Noisy-style f64 run whose
//!    stores then round to their type); or, with nothing stored below f32 apart from its shadow
//!    (all at f32, or only KV caches below it that end their shadow's to the bit), it is off
//!    beyond the model, which one sign pattern of 2⁻²⁴ underestimates on rare ill-conditioned
//!    graphs (the units are the same code over f32 as over f64). None can stand for a value that
//!    is wrong at f64: the structure was judged first, exactly.
//!
//! Measured (docs/SOUNDNESS.md): gen_run 5,000, structure within 2.7e-13 on every case and numerics
//! without a false failure or an inconclusive at any numerics; gen_run 30,000, one f32 case beyond
//! the model (inconclusive).

/// The tolerance of the structural comparison: the engine's units over f64, every stored value
/// kept exactly, against the reference; relative to the scale of each compared tensor.
pub const EXACT: f64 = 1e-9;

/// The floor of the numerics tolerance: f32 arithmetic inside a unit, which no store shows
/// (measured errors on the presets and fixtures stay below 1.1e-5 of the scale).
pub const F32: f64 = 1e-4;

/// How many times the f32-arithmetic model's effect the engine may be off its shadow.
pub const MARGIN: f64 = 4.0;

/// The largest numerics tolerance, relative to the scale, that still judges anything: beyond it
/// rounding alone moves the output as far as a wrong program does, and the numerics comparison is
/// inconclusive.
pub const LIMIT: f64 = 0.1;

/// The numerics tolerance given the f32-arithmetic model's largest relative effect on the output.
pub fn tolerance(model_effect: f64) -> f64 {
    F32.max(MARGIN * model_effect)
}

/// The numerics judged as every check judges them: within the floor [`F32`] first, and only when
/// a value is beyond it within [`tolerance`] of the model's effect, which `effect` measures (the
/// model is not run otherwise: no tolerance is below the floor, so within it the engine agrees at
/// every tolerance the model could give). `judge(tol)` compares the engine with its shadow within
/// `tol`, and `beyond` says whether that comparison found a value out of it. Returns the
/// comparison that decides, with its tolerance.
pub fn judge_numerics<J, E>(
    mut judge: impl FnMut(f64) -> J,
    beyond: impl Fn(&J) -> bool,
    effect: impl FnOnce() -> Result<f64, E>,
) -> Result<(J, f64), E> {
    let within_floor = judge(F32);
    if !beyond(&within_floor) {
        return Ok((within_floor, F32));
    }
    let tol = tolerance(effect()?);
    Ok((judge(tol), tol))
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

    #[test]
    fn the_model_runs_only_for_a_value_beyond_the_floor_and_then_sets_the_tolerance() {
        // (the engine's largest gap from its shadow, the model's effect, the tolerance judged
        // within, whether the model ran, whether a value is out of that tolerance)
        for (gap, effect, tol, ran, out) in [
            (5e-5, 1.0, F32, false, false),
            (F32, 1.0, F32, false, false),
            (2e-4, 1e-4, 4e-4, true, false),
            (2e-4, 1e-5, F32, true, true),
            (0.5, 0.1, 0.4, true, true),
        ] {
            let mut runs = 0;
            let judged = judge_numerics(
                |tol| gap > tol,
                |&out| out,
                || {
                    runs += 1;
                    Ok::<_, ()>(effect)
                },
            );
            assert_eq!(judged, Ok((out, tol)), "gap {gap}, effect {effect}");
            assert_eq!(runs, usize::from(ran), "gap {gap}, effect {effect}");
        }
    }
}
