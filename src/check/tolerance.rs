//! How far the engine may be from the reference: one place, with the reasoning.
//!
//! The reference computes in f64 from the checkpoint's f32 values; the engine computes in f32 and
//! rounds what it stores to its storage types. A tensor is compared as a whole: a value agrees when
//! `|engine − reference| ≤ tol · scale`, where `scale = max(1, max |reference|)` over the tensor,
//! so that a logit near zero is judged on the tensor's scale, not its own.
//!
//! Why these numbers. In f32 the engine's error is f32 arithmetic: accumulation over rows of up to a
//! few thousand adds about `√n·2⁻²⁴` per dot product, and the measured errors on the presets and
//! fixtures stay below 1.1e-5 of the scale, an order of magnitude under the floor `F32` (figures in
//! docs/SOUNDNESS.md).
//!
//! A reduced storage type rounds every value the engine stores by up to `u` (its unit roundoff), and
//! how far that moves the logits depends on the model, not only on `u`: a delta rule's `k·q` of
//! nearly orthogonal unit vectors loses relative precision by cancellation, and an untrained layer
//! amplifies what it reads (measured: bf16 activations put the `small` preset's logits 1.6% of
//! their scale off after one layer and 17% after eight, with no bug). So the tolerance of a reduced
//! type is measured on the reference itself, never on the engine: the reference is run again on a
//! checkpoint whose every value is perturbed by a relative `±u` (deterministic signs), and the
//! largest relative change it shows, times `MARGIN`, is the tolerance. Every bug class the gate is
//! meant to catch moves values by O(0.1–1) of the scale in f32, where the bound is tight.

use crate::engine::{Numerics, Storage};

/// The tolerance of f32 storage and arithmetic, relative to the scale of each compared tensor.
pub const F32: f64 = 1e-4;

/// How many times the reference's own sensitivity to `±u` perturbations a reduced type may be off.
pub const MARGIN: f64 = 4.0;

/// The unit roundoff the reference is perturbed by for `numerics`, or `None` when it stores
/// everything in f32 and the fixed tolerance [`F32`] applies.
pub fn perturbation(numerics: Numerics) -> Option<f64> {
    let coarsest = [numerics.activations, numerics.kv_cache, numerics.recurrent_state]
        .into_iter()
        .map(Storage::unit_roundoff)
        .fold(0f64, f64::max);
    (coarsest > Storage::F32.unit_roundoff()).then_some(coarsest)
}

/// The tolerance given the reference's measured relative sensitivity to a perturbation of `u`.
pub fn tolerance(sensitivity: Option<f64>) -> f64 {
    sensitivity.map_or(F32, |s| F32.max(MARGIN * s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_has_a_fixed_tolerance_and_reduced_types_a_measured_one() {
        let f16 = Numerics { activations: Storage::F16, kv_cache: Storage::F32, recurrent_state: Storage::F32 };
        // (numerics, perturbation)
        let cases = [(Numerics::F32, None), (Numerics::BF16, Some(2f64.powi(-8))), (f16, Some(2f64.powi(-11)))];
        for (n, want) in cases {
            assert_eq!(perturbation(n), want, "{n}");
        }
        assert_eq!(tolerance(None), F32);
        assert_eq!(tolerance(Some(0.01)), 0.04);
        assert_eq!(tolerance(Some(1e-9)), F32);
    }
}
