//! Where the program stores each value and in which type, and the check's own rounding to it.
//!
//! Both follow from the program and its numerics alone (docs/PROGRAM.md, "Numerics and storage"),
//! never from what the engine's units say of themselves: every buffer a unit writes and every conv
//! window is stored as `numerics.activations`, a KV cache as `numerics.kv_cache`, a delta state as
//! `numerics.recurrent_state`. The rounding is the check's, from f64: to nearest, ties to even, at
//! the type's precision and exponent range (subnormals included, overflow to ±∞), written here
//! apart from the engine's (`Storage::round`, from f32 through `half`).

use crate::engine::numerics::{Numerics, Storage};
use crate::engine::program::StateLayout;

/// What a Command writes: a buffer, or a state of the given layout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Place<'p> {
    Buffer,
    State(&'p StateLayout),
}

/// The type the numerics store a value written at `place` in; `None` for the position, an
/// integer.
pub(crate) fn stored_as(numerics: &Numerics, place: Place<'_>) -> Option<Storage> {
    match place {
        Place::Buffer | Place::State(StateLayout::ConvWindow { .. }) => Some(numerics.activations),
        Place::State(StateLayout::KvCache { .. }) => Some(numerics.kv_cache),
        Place::State(StateLayout::DeltaState { .. }) => Some(numerics.recurrent_state),
        Place::State(StateLayout::Position) => None,
    }
}

/// A storage type's format: bits of precision (the leading one included), the least normal
/// exponent and the largest finite value.
fn format(storage: Storage) -> (i32, i32, f64) {
    match storage {
        Storage::F32 => (24, -126, f64::from(f32::MAX)),
        Storage::Bf16 => (8, -126, (2.0 - 2f64.powi(-7)) * 2f64.powi(127)),
        Storage::F16 => (11, -14, 65504.0),
    }
}

/// `x` rounded to the nearest value of `storage`, ties to even; ±∞ beyond its range; NaN and
/// infinities as they are.
pub fn round_to(storage: Storage, x: f64) -> f64 {
    match storage {
        // Rust's f64 to f32 conversion rounds to nearest, ties to even, subnormals and overflow
        // included: this very rounding, in one instruction.
        Storage::F32 => f64::from(x as f32),
        _ => nearest(x, format(storage)),
    }
}

/// `x` rounded to nearest, ties to even, in the format `(precision, least normal exponent,
/// largest finite value)`; NaN and infinities as they are.
fn nearest(x: f64, (precision, min_exp, max): (i32, i32, f64)) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    // The exponent of x's leading bit (x is a normal f64 here: every f32, bf16 and f16 value and
    // anything rounding near one is far above f64's subnormals), and the spacing of the format's
    // values there, a power of two made from its bits.
    let exp = ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let step = f64::from_bits(((exp.max(min_exp) - (precision - 1) + 1023) as u64) << 52);
    let r = (x / step).round_ties_even() * step;
    if r.abs() > max { f64::INFINITY.copysign(x) } else { r }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checks_rounding_is_the_nearest_value_of_each_type() {
        // Every class of f32 bit pattern, against `half`'s rounding from f32 (correct for f32
        // inputs) and f32 itself.
        let mut bits = 0x3f80_0000u32;
        for _ in 0..300_000 {
            bits = bits.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let x = f32::from_bits(bits);
            if !x.is_finite() {
                continue;
            }
            let w = f64::from(x);
            assert_eq!(round_to(Storage::F32, w), w, "f32 {x:e}");
            assert_eq!(round_to(Storage::Bf16, w), f64::from(half::bf16::from_f32(x).to_f32()), "bf16 {x:e}");
            assert_eq!(round_to(Storage::F16, w), f64::from(half::f16::from_f32(x).to_f32()), "f16 {x:e}");
        }
    }

    #[test]
    fn f64_values_round_as_the_f32_conversion_does_and_ties_go_to_even() {
        // (type, value, rounded)
        let one_and_half_ulp = 1.0 + 2f64.powi(-8);
        let cases = [
            (Storage::Bf16, one_and_half_ulp, 1.0),
            (Storage::Bf16, one_and_half_ulp + 1e-12, 1.0 + 2f64.powi(-7)),
            (Storage::F16, 65520.0, f64::INFINITY),
            (Storage::F16, 65519.9, 65504.0),
            (Storage::F16, 2f64.powi(-25), 0.0),
            (Storage::F16, 3.0 * 2f64.powi(-25), 2f64.powi(-23)),
            (Storage::F16, 2.5 * 2f64.powi(-24), 2f64.powi(-23)),
        ];
        for (storage, x, want) in cases {
            assert_eq!(round_to(storage, x), want, "{storage} {x:e}");
        }
        let mut s = 7u64;
        for _ in 0..100_000 {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let x = f64::from_bits((s >> 2) | 0x3000_0000_0000_0000) * if s & 1 == 0 { 1.0 } else { -1.0 };
            if x.is_finite() {
                // The general rounding at f32's format is the conversion's.
                assert_eq!(nearest(x, format(Storage::F32)), f64::from(x as f32), "{x:e}");
            }
        }
    }
}
