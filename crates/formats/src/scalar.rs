//! The scalar functions both interpreters may share: each is one formula, unit-tested here.

/// `1 / (1 + e^−x)`, without overflow for large |x|.
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// `x · sigmoid(x)`.
pub fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

/// `log(1 + e^x)`, returning `x` above 20 as torch does.
pub fn softplus(x: f64) -> f64 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// The exact GELU `x · Φ(x) = x/2 · (1 + erf(x/√2))`.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// The tanh approximation `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`.
pub fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// `max(x, 0)`.
pub fn relu(x: f64) -> f64 {
    x.max(0.0)
}

/// The error function, to 1.2e-7 relative (Numerical Recipes' `erfc` Chebyshev fit), enough for
/// f64 references compared at 1e-4.
pub fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = 1.0 - t * poly.exp();
    if x >= 0.0 { r } else { -r }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    #[test]
    fn values_at_known_points() {
        // (function, x, value from the closed form or torch).
        type Case = (fn(f64) -> f64, f64, f64);
        let cases: [Case; 12] = [
            (sigmoid, 0.0, 0.5),
            (sigmoid, 2.0, 0.880_797_077_977_882_3),
            (sigmoid, -800.0, 0.0),
            (silu, 1.0, 0.731_058_578_630_004_9),
            (silu, -1.0, -0.268_941_421_369_995_1),
            (softplus, 0.0, std::f64::consts::LN_2),
            (softplus, 25.0, 25.0),
            (softplus, -30.0, 9.357_622_968_840_175e-14),
            (gelu, 1.0, 0.841_344_746_068_542_9),
            (gelu_tanh, 1.0, 0.841_191_990_607_477_9),
            (relu, -2.0, 0.0),
            (erf, 0.5, 0.520_499_877_813_046_5),
        ];
        for (f, x, want) in cases {
            assert_abs_diff_eq!(f(x), want, epsilon = 2e-7);
        }
    }
}
