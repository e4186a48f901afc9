//! The RoPE op of an attention layer: plain `rope` with θ for the default frequencies, `rope_freqs`
//! with the frequencies and attention factor a scaling scheme computes, as transformers'
//! `modeling_rope_utils` computes them.

use crate::spec::RopeScaling;
use ir::{OpKind, RopeStyle};

/// The RoPE op turning the first `dims` dims of each head by θ, scaled by `scaling` if given.
pub(crate) fn rope_op(theta: f64, dims: usize, style: RopeStyle, scaling: Option<&RopeScaling>) -> OpKind {
    match scaling {
        None => OpKind::Rope { theta, rotary_dims: dims, style },
        Some(s) => {
            let (inv_freq, scale) = frequencies(theta, dims, s);
            OpKind::RopeFreqs { inv_freq, scale, style }
        }
    }
}

/// The inverse frequencies of the `dims / 2` pairs and the factor the turned dims are multiplied
/// by, for RoPE with base θ scaled by `scaling`.
///
/// Linear: `θ^(−2i/d) / factor` (`_compute_linear_scaling_rope_parameters`). YaRN
/// (`_compute_yarn_parameters`): with `correction(β) = d·ln(original / (2πβ)) / (2 ln θ)`, the ramp
/// runs from `low = correction(beta_fast)` to `high = correction(beta_slow)` (floored and ceiled
/// when `truncate`, then kept within `[0, d−1]`, `high` nudged by 0.001 if they meet);
/// `r_i = clamp((i − low)/(high − low), 0, 1)` and `inv_freq_i = θ^(−2i/d) · (r_i / factor + 1 − r_i)`.
pub fn frequencies(theta: f64, dims: usize, scaling: &RopeScaling) -> (Vec<f64>, f64) {
    let d = dims as f64;
    let base = (0..dims / 2).map(move |i| theta.powf(-2.0 * i as f64 / d));
    match *scaling {
        RopeScaling::Linear { factor } => (base.map(|f| f / factor).collect(), 1.0),
        RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, truncate, attention_factor } => {
            let correction = |rotations: f64| {
                d * (original_context as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln())
            };
            let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
            if truncate {
                (low, high) = (low.floor(), high.ceil());
            }
            let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
            if low == high {
                high += 0.001;
            }
            let freqs = base
                .enumerate()
                .map(|(i, f)| {
                    let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    f / factor * ramp + f * (1.0 - ramp)
                })
                .collect();
            (freqs, attention_factor)
        }
    }
}

/// YaRN's default attention factor for a context scaled by `factor`: `0.1·ln(factor) + 1` (1 when
/// `factor ≤ 1`), or, with DeepSeek's `mscale` and `mscale_all_dim`, the ratio of that form at each.
pub fn yarn_attention_factor(factor: f64, mscale: Option<f64>, mscale_all_dim: Option<f64>) -> f64 {
    let get = |m: f64| if factor <= 1.0 { 1.0 } else { 0.1 * m * factor.ln() + 1.0 };
    match (mscale, mscale_all_dim) {
        (Some(m), Some(all)) if m != 0.0 && all != 0.0 => get(m) / get(all),
        _ => get(1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_scaling_divides_every_frequency() {
        let (f, s) = frequencies(1e4, 4, &RopeScaling::Linear { factor: 8.0 });
        assert_eq!(s, 1.0);
        assert!((f[0] - 1.0 / 8.0).abs() < 1e-15 && (f[1] - 0.01 / 8.0).abs() < 1e-15, "{f:?}");
    }

    #[test]
    fn yarn_keeps_fast_pairs_and_interpolates_slow_ones() {
        // gpt-oss's parameters on 16 dims: the first pairs keep θ^(−2i/d), the last are divided by
        // the factor, and the attention factor is 0.1·ln 32 + 1.
        let att = yarn_attention_factor(32.0, None, None);
        let yarn = RopeScaling::Yarn {
            factor: 32.0,
            original_context: 4096,
            beta_fast: 32.0,
            beta_slow: 1.0,
            truncate: false,
            attention_factor: att,
        };
        let (f, s) = frequencies(150_000.0, 16, &yarn);
        let plain = |i: usize| 150_000f64.powf(-2.0 * i as f64 / 16.0);
        assert_eq!(s, 0.1 * 32f64.ln() + 1.0);
        assert!((f[0] - plain(0)).abs() < 1e-15);
        assert!((f[7] - plain(7) / 32.0).abs() < 1e-15);
        assert!(f.windows(2).all(|w| w[1] < w[0]), "frequencies fall: {f:?}");
    }

    #[test]
    fn deepseek_mscale_ratio_is_one_when_both_are_equal() {
        assert_eq!(yarn_attention_factor(40.0, Some(1.0), Some(1.0)), 1.0);
        assert_eq!(yarn_attention_factor(0.5, None, None), 1.0);
    }
}
