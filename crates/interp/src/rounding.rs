//! Roundings another engine makes that the step graph's values do not: an op's input rounded to a
//! stored type before the op reads it, as llama.cpp rounds a matrix product's column to its
//! weights' dot type and a KV cache's row to the cache's type. None is made unless a caller asks
//! (`Runner::round_input`); the check never does. Each is written from llama.cpp's reference rule
//! (`ggml-quants.c`), in f32 as llama.cpp computes it.

use half::f16;

/// A rounding of a vector to a stored type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// Each value to the nearest f16.
    F16,
    /// Q8_0: per block of 32 values with `a = max |x|`, `d = a/127` stored as f16 and
    /// `q = round(x · 127/a)` (halves away from zero); the value `q · d`.
    Q8_0,
    /// Q8_K: per block of 256 values with `m` the value of largest magnitude (the first),
    /// `s = −127/m`, `q = min(127, round_half_even(s · x))`; the value `q · (1/s)`.
    Q8K,
}

impl Rounding {
    /// The values a block holds, or one for a per-value rounding.
    fn block(self) -> usize {
        match self {
            Rounding::F16 => 1,
            Rounding::Q8_0 => 32,
            Rounding::Q8K => 256,
        }
    }
}

/// `x` rounded by `r`, or why it cannot be (a length that is not whole blocks).
pub(crate) fn round(r: Rounding, x: &mut [f64]) -> Result<(), String> {
    if !x.len().is_multiple_of(r.block()) {
        return Err(format!("{} values are not whole blocks of {} for {r:?}", x.len(), r.block()));
    }
    for block in x.chunks_mut(r.block()) {
        let v: Vec<f32> = block.iter().map(|&a| a as f32).collect();
        let out: Vec<f32> = match r {
            Rounding::F16 => v.iter().map(|&a| f16::from_f32(a).to_f32()).collect(),
            Rounding::Q8_0 => {
                let a = v.iter().fold(0f32, |m, x| m.max(x.abs()));
                let d = a / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let stored = f16::from_f32(d).to_f32();
                v.iter().map(|&x| (x * id).round() * stored).collect()
            }
            Rounding::Q8K => {
                let m = v.iter().fold(0f32, |m, &x| if x.abs() > m.abs() { x } else { m });
                if m == 0.0 {
                    vec![0.0; v.len()]
                } else {
                    let s = -127.0 / m;
                    let d = 1.0 / s;
                    v.iter().map(|&x| (s * x).round_ties_even().min(127.0) * d).collect()
                }
            }
        };
        for (b, o) in block.iter_mut().zip(out) {
            *b = f64::from(o);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_keeps_the_block_maximum_and_rounds_the_rest_to_its_127ths() {
        let mut x: Vec<f64> = (0..32).map(|i| f64::from(i) - 10.0).collect();
        x[5] = 127.0;
        round(Rounding::Q8_0, &mut x).expect("whole blocks");
        assert_eq!(x[5], 127.0);
        assert_eq!(x[0], -10.0);
    }

    #[test]
    fn q8_k_keeps_the_signed_extreme_exactly_and_rounds_the_rest_to_its_127ths() {
        let mut x = vec![0.0; 256];
        x[0] = -2.0;
        x[1] = 2.0;
        x[2] = 0.5;
        round(Rounding::Q8K, &mut x).expect("whole blocks");
        // s = −127/−2 = 63.5: ±2 ↦ ±127 · (1/s) = ±2, 0.5 ↦ round(31.75) = 32 ↦ 32/63.5
        assert!((x[0] + 2.0).abs() < 1e-6 && (x[1] - 2.0).abs() < 1e-6, "{:?}", &x[..3]);
        assert!((x[2] - 32.0 / 63.5).abs() < 1e-6, "{:?}", &x[..3]);
    }

    #[test]
    fn a_length_that_is_not_whole_blocks_is_refused() {
        assert!(round(Rounding::Q8K, &mut [0.0; 100]).is_err());
        assert!(round(Rounding::F16, &mut [1.0 / 3.0]).is_ok());
    }
}
