//! The engine's matvec kernels (`engine::run::kernels`) as specifications:
//!
//! - the scalar path of every type is the file format's decoder (bit-exact with ggml) followed by
//!   an in-order f32 dot product, exactly, for every vector of a batch;
//! - the SIMD path (where the machine has one) is within `2·γ_n·Σ|w·x| + (2n + n/32)·2⁻¹⁵⁰` of the
//!   scalar path: both sum the same exact products `w·x` of the same f32 weights and differ only in
//!   the order of the sums (and FMA's one rounding for two), each within `γ_n·Σ|w·x|` of the exact
//!   sum plus the underflow of its rounded products (`n`, and Q8_0's SIMD path `n/32` more: one per
//!   block; `γ_n = n·u / (1 − n·u)`, `u = 2⁻²⁴`);
//! - `matmat` over a batch is `matvec` for each of its vectors, on the same bound (a batch keeps
//!   fewer accumulators per vector than one vector does), and exactly on the scalar path;
//! - threads split rows without changing a value;
//! - under `KquantInputs::Q8K`, a Q4_K, Q5_K or Q6_K matvec quantizes its input by the rule (each value
//!   within half a step `a / 127` of its integer's), and its value is the dot product of the
//!   decoded weights with the quantized input, within the f32 roundings of its block sums; its SIMD
//!   path is its scalar path bit for bit, and a batch its vectors one at a time;
//! - the engine's sigmoid and SiLU (`kernels::activation`) are `scalar`'s f64 formulas rounded
//!   once, their `e^−|x|` within 4 f64 units of glibc's `exp`, every path the portable one.
//!
//! Shapes are random: 1 to 5 rows, 1 to 6 blocks per row (0 to 70 values for the float types, odd
//! lengths included), batches of 1 to 11 vectors (past the 8 one pass serves).

use proptest::prelude::*;
use stepcheck::engine::KquantInputs;
use stepcheck::engine::run::kernels::{
    Isa, MAX_BATCH, Matrix, activation, detected, has_kernel, matmat, matmat_on, matvec,
    q8k::Q8k,
    threads::{Strategy as Split, over_rows_with},
};
use stepcheck::formats::gguf::GgmlType;
use stepcheck::scalar;

/// The types with kernels, and two read through their decoder (a legacy quant and a k-quant).
const TYPES: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q4_0,
    GgmlType::Q2_K,
];

/// The byte offsets of a block's f16 scales, which are set to finite values (a random f16 may be
/// infinite or NaN, which makes every sum NaN and a comparison vacuous).
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q8_0 | GgmlType::Q4_0 => &[0],
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::Q2_K => &[80, 82],
        _ => &[],
    }
}

/// A matrix of `rows × cols` of `ty` from random bytes: float values with their exponent bounded
/// (finite, and sums that cannot overflow), quantized blocks with finite scales below 4 in size.
fn weights(ty: GgmlType, rows: usize, cols: usize, seed: &[u8]) -> Vec<u8> {
    let (block, block_bytes) = ty.block().map(|(n, b)| (n as usize, b as usize)).unwrap();
    let len = rows * cols / block * block_bytes;
    let mut bytes: Vec<u8> =
        (0..len).map(|i| seed[i % seed.len()].wrapping_mul(31).wrapping_add(i as u8 ^ (i >> 8) as u8)).collect();
    match ty {
        GgmlType::F32 => bytes.chunks_exact_mut(4).for_each(|v| v[3] = (v[3] & 0x80) | (v[3] & 0x3F).min(0x49)),
        GgmlType::F16 => bytes.chunks_exact_mut(2).for_each(|v| v[1] = (v[1] & 0x80) | (v[1] & 0x7F).min(0x77)),
        GgmlType::BF16 => bytes.chunks_exact_mut(2).for_each(|v| v[1] = (v[1] & 0x80) | (v[1] & 0x3F).min(0x49)),
        _ => {
            for b in bytes.chunks_exact_mut(block_bytes) {
                for &at in scale_offsets(ty) {
                    // An f16 of exponent at most 16 (below 4 in size), any sign, fraction and subnormal.
                    b[at + 1] = (b[at + 1] & 0x83) | (b[at + 1] & 0x7C).min(0x40);
                }
            }
        }
    }
    bytes
}

/// The specification: each row decoded by the format's decoder, each product summed in order.
fn decoded(m: &Matrix, xs: &[f32], batch: usize) -> Vec<f32> {
    let decode = m.ty().decoder().unwrap();
    let mut out = vec![0f32; batch * m.rows()];
    for r in 0..m.rows() {
        let w = decode(m.row(r)).unwrap();
        for b in 0..batch {
            let x = &xs[b * m.cols()..(b + 1) * m.cols()];
            out[b * m.rows() + r] = w.iter().zip(x).map(|(w, x)| w * x).sum::<f32>();
        }
    }
    out
}

/// `2·γ_n·Σ|w·x| + (2n + n/32)·2⁻¹⁵⁰` for each output, in f64: how far two f32 sums of the same products in
/// different orders may be apart.
fn bounds(m: &Matrix, xs: &[f32], batch: usize) -> Vec<f64> {
    let decode = m.ty().decoder().unwrap();
    let n = m.cols() as f64;
    let u = f64::powi(2.0, -24);
    let gamma = n * u / (1.0 - n * u);
    let mut out = vec![0f64; batch * m.rows()];
    for r in 0..m.rows() {
        let w = decode(m.row(r)).unwrap();
        for b in 0..batch {
            let x = &xs[b * m.cols()..(b + 1) * m.cols()];
            let abs: f64 = w.iter().zip(x).map(|(w, x)| (f64::from(*w) * f64::from(*x)).abs()).sum();
            out[b * m.rows() + r] = 2.0 * gamma * abs + (2.0 * n + n / 32.0) * f64::powi(2.0, -150);
        }
    }
    out
}

fn within(a: &[f32], b: &[f32], bound: &[f64]) -> Result<(), String> {
    for (i, ((a, b), bound)) in a.iter().zip(b).zip(bound).enumerate() {
        let gap = (f64::from(*a) - f64::from(*b)).abs();
        if gap.is_nan() || gap > *bound {
            return Err(format!("output {i}: {a} vs {b}, apart {gap:e} > bound {bound:e}"));
        }
    }
    Ok(())
}

/// A random case: a type, a shape in whole blocks, a batch, and seeds for the weights and vectors.
fn case() -> impl Strategy<Value = (GgmlType, usize, usize, usize, Vec<u8>, Vec<f32>)> {
    let shape = (0..TYPES.len(), 1usize..=5, 0usize..=70, any::<bool>());
    (shape, 1usize..=11, prop::collection::vec(any::<u8>(), 1..64)).prop_flat_map(
        |((t, rows, units, wide), batch, seed)| {
            let ty = TYPES[t];
            let block = ty.block().unwrap().0 as usize;
            // A float row is short, or wider than the 1,024 values its pair kernel runs whole.
            let cols = match (block, wide) {
                (1, false) => units,
                (1, true) => 1000 + 37 * units,
                _ => block * (1 + units % 6),
            };
            let xs = prop::collection::vec(-4.0f32..4.0, batch * cols);
            (Just(ty), Just(rows), Just(cols), Just(batch), Just(seed), xs)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn the_scalar_path_is_the_decoder_and_an_in_order_dot_exactly((ty, rows, cols, batch, seed, xs) in case()) {
        let bytes = weights(ty, rows, cols, &seed);
        let m = Matrix::new(ty, &bytes, rows, cols).unwrap();
        let mut out = vec![f32::NAN; batch * rows];
        matmat_on(Isa::Scalar, &m, &xs, batch, &mut out, 1);
        let want = decoded(&m, &xs, batch);
        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
            prop_assert!(a == b, "{ty} [{rows}, {cols}] × {batch}: output {i} is {a}, the decoder's dot {b}");
        }
    }

    #[test]
    fn the_simd_path_is_the_scalar_path_up_to_summation_order((ty, rows, cols, batch, seed, xs) in case()) {
        let bytes = weights(ty, rows, cols, &seed);
        let m = Matrix::new(ty, &bytes, rows, cols).unwrap();
        let (mut simd, mut scalar) = (vec![f32::NAN; batch * rows], vec![f32::NAN; batch * rows]);
        matmat_on(detected(), &m, &xs, batch, &mut simd, 1);
        matmat_on(Isa::Scalar, &m, &xs, batch, &mut scalar, 1);
        if let Err(e) = within(&simd, &scalar, &bounds(&m, &xs, batch)) {
            prop_assert!(false, "{ty} [{rows}, {cols}] × {batch} on {:?}: {e}", detected());
        }
    }

    #[test]
    fn matmat_is_matvec_for_each_vector_of_the_batch_bit_for_bit((ty, rows, cols, batch, seed, xs) in case()) {
        // A vector's products are summed in one order whatever the batch (and however its passes
        // split it): a row of a batched step is the row of the single step, to the bit.
        let bytes = weights(ty, rows, cols, &seed);
        let m = Matrix::new(ty, &bytes, rows, cols).unwrap();
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            let mut together = vec![f32::NAN; batch * rows];
            matmat_on(isa, &m, &xs, batch, &mut together, 1);
            let mut apart = vec![f32::NAN; batch * rows];
            for (b, out) in apart.chunks_exact_mut(rows).enumerate() {
                matmat_on(isa, &m, &xs[b * cols..(b + 1) * cols], 1, out, 1);
            }
            let same = together.iter().zip(&apart).all(|(a, b)| a.to_bits() == b.to_bits());
            prop_assert!(same, "{ty} [{rows}, {cols}] × {batch} on {isa:?}: {together:?} against {apart:?}");
        }
    }

    #[test]
    fn the_wide_register_path_is_the_avx2_path_bit_for_bit((ty, rows, cols, batch, seed, xs) in case()) {
        let bytes = weights(ty, rows, cols, &seed);
        let m = Matrix::new(ty, &bytes, rows, cols).unwrap();
        let (mut wide, mut narrow) = (vec![f32::NAN; batch * rows], vec![f32::NAN; batch * rows]);
        matmat_on(Isa::Avx512, &m, &xs, batch, &mut wide, 1);
        matmat_on(Isa::Avx2, &m, &xs, batch, &mut narrow, 1);
        let same = wide.iter().zip(&narrow).all(|(a, b)| a.to_bits() == b.to_bits());
        prop_assert!(same, "{ty} [{rows}, {cols}] × {batch}: {wide:?} against {narrow:?}");
    }
}

/// A random case of a matvec under `KquantInputs::Q8K`: Q4_K, Q5_K or Q6_K, a shape, a batch, seeds, and
/// vectors whose blocks are of one of three scales (so that some steps `a / 127` are tiny), with
/// some blocks all zero.
fn q8k_case() -> impl Strategy<Value = (GgmlType, usize, usize, usize, Vec<u8>, Vec<f32>)> {
    let ty = prop::sample::select(vec![GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K]);
    (ty, 1usize..=4, 1usize..=4, 1usize..=10, prop::collection::vec(any::<u8>(), 1..64)).prop_flat_map(
        |(ty, rows, blocks, batch, seed)| {
            let block = prop_oneof![
                prop::collection::vec(-4.0f32..4.0, 256),
                prop::collection::vec(-1e-3f32..1e-3, 256),
                Just(vec![0.0f32; 256]),
            ];
            let xs = prop::collection::vec(block, batch * blocks).prop_map(|b| b.concat());
            (Just(ty), Just(rows), Just(256 * blocks), Just(batch), Just(seed), xs)
        },
    )
}

/// The spec of a Q8_K matvec: each row's decoded weights dotted in f64 with each vector's
/// quantized values `d · q`, and the bound of the f32 roundings in the kernel's block sums:
/// `(16 + blocks) · u · Σᵢ (|wᵢ| + 63·|dmin|) · |d·qᵢ|` (`|d·scale·q| ≤ |w| + 63·|dmin|`, and each
/// block's two products, their difference and the row's sum of blocks round once each).
fn q8k_spec(m: &Matrix, xs: &[f32], batch: usize) -> (Vec<f64>, Vec<f64>) {
    let decode = m.ty().decoder().unwrap();
    let (cols, blocks) = (m.cols(), m.cols() / 256);
    let u = f64::powi(2.0, -24);
    let (mut want, mut bound) = (vec![0f64; batch * m.rows()], vec![0f64; batch * m.rows()]);
    for b in 0..batch {
        let x = Q8k::quantize(&xs[b * cols..(b + 1) * cols]);
        let value = |i: usize| f64::from(x.d[i / 256]) * f64::from(x.q[i]);
        for r in 0..m.rows() {
            let (row, w) = (m.row(r), decode(m.row(r)).unwrap());
            // The block's `dmin`: bytes 2..4 of a Q4_K (144-byte) or Q5_K (176-byte) block; Q6_K has none.
            let dmin = |i: usize| {
                let bytes = match m.ty() {
                    GgmlType::Q4_K => 144,
                    GgmlType::Q5_K => 176,
                    _ => return 0.0,
                };
                let at = bytes * (i / 256) + 2;
                f64::from(half::f16::from_le_bytes([row[at], row[at + 1]]).to_f32())
            };
            want[b * m.rows() + r] = (0..cols).map(|i| f64::from(w[i]) * value(i)).sum();
            let size: f64 = (0..cols).map(|i| (f64::from(w[i]).abs() + 63.0 * dmin(i).abs()) * value(i).abs()).sum();
            bound[b * m.rows() + r] = (16.0 + blocks as f64) * u * size + 1e-40;
        }
    }
    (want, bound)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn q8k_quantization_keeps_each_value_within_half_a_step_of_its_integer(
        xs in prop::collection::vec(prop_oneof![-4.0f32..4.0, -1e-30f32..1e-30, Just(0.0f32)], 256..=256)
    ) {
        let x = Q8k::quantize(&xs);
        let a = xs.iter().fold(0f32, |a, x| a.max(x.abs()));
        prop_assert_eq!(x.d[0], a / 127.0);
        for (i, (&v, &q)) in xs.iter().zip(&x.q).enumerate() {
            prop_assert!((-127..=127).contains(&q), "q[{}] = {}", i, q);
            if a > 0.0 {
                // The rule computes `x · (127 / a)` in f32: two roundings, each within 2⁻²⁴ of the
                // value, move the product by at most |x·127/a| · (2·2⁻²⁴ + 2⁻⁴⁸) before it is
                // rounded to an integer.
                let exact = f64::from(v) * 127.0 / f64::from(a);
                let u = 2f64.powi(-24);
                let bound = 0.5 + exact.abs() * (2.0 * u + u * u);
                prop_assert!((exact - f64::from(q)).abs() <= bound, "x[{}] = {} (step {}) → {}", i, v, a / 127.0, q);
            }
            if v.abs() == a && a > 0.0 {
                prop_assert_eq!(i32::from(q).abs(), 127);
            }
        }
        for (s, sum) in x.sums.iter().enumerate() {
            prop_assert_eq!(*sum, x.q[16 * s..16 * s + 16].iter().map(|&q| i16::from(q)).sum::<i16>());
        }
    }

    #[test]
    fn a_q8k_matvec_is_the_decoded_weights_dotted_with_the_quantized_input(
        (ty, rows, cols, batch, seed, xs) in q8k_case()
    ) {
        let bytes = weights(ty, rows, cols, &seed);
        let m = Matrix::new(ty, &bytes, rows, cols).unwrap().with_inputs(KquantInputs::Q8K);
        prop_assert!(m.quantizes_inputs());
        let (want, bound) = q8k_spec(&m, &xs, batch);
        let mut scalar = vec![f32::NAN; batch * rows];
        matmat_on(Isa::Scalar, &m, &xs, batch, &mut scalar, 1);
        for (i, ((got, want), bound)) in scalar.iter().zip(&want).zip(&bound).enumerate() {
            let gap = (f64::from(*got) - want).abs();
            prop_assert!(gap <= *bound, "{} [{}, {}] × {}: output {}: {} vs {}, apart {:e} > {:e}", ty, rows, cols, batch, i, got, want, gap, bound);
        }
        for isa in [Isa::Avx2, Isa::Avx512] {
            let mut simd = vec![f32::NAN; batch * rows];
            matmat_on(isa, &m, &xs, batch, &mut simd, 1);
            let same = simd.iter().zip(&scalar).all(|(a, b)| a.to_bits() == b.to_bits());
            prop_assert!(same, "{} on {:?}: {:?} against the scalar path's {:?}", ty, isa, simd, scalar);
            let mut apart = vec![f32::NAN; batch * rows];
            for (b, out) in apart.chunks_exact_mut(rows).enumerate() {
                matmat_on(isa, &m, &xs[b * cols..(b + 1) * cols], 1, out, 1);
            }
            let same = simd.iter().zip(&apart).all(|(a, b)| a.to_bits() == b.to_bits());
            prop_assert!(same, "{} on {:?}: a batch against its vectors one at a time", ty, isa);
        }
    }
}

#[test]
fn a_q8k_block_with_a_value_that_is_not_finite_makes_every_row_nan() {
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        let bytes = weights(ty, 3, 512, &[7, 1, 9]);
        let m = Matrix::new(ty, &bytes, 3, 512).unwrap().with_inputs(KquantInputs::Q8K);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x: Vec<f32> = (0..512).map(|i| (i % 7) as f32 - 3.0).collect();
            x[300] = bad;
            for isa in [Isa::Scalar, Isa::Avx2] {
                let mut out = vec![0f32; 3];
                matmat_on(isa, &m, &x, 1, &mut out, 1);
                assert!(out.iter().all(|v| v.is_nan()), "{ty} {bad} on {isa:?}: {out:?}");
            }
        }
    }
}

#[test]
fn only_q4_k_q5_k_and_q6_k_matrices_quantize_their_inputs() {
    for ty in TYPES {
        let bytes = weights(ty, 1, 256, &[3]);
        let m = Matrix::new(ty, &bytes, 1, 256).unwrap();
        let want = matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
        assert_eq!(m.with_inputs(KquantInputs::Q8K).quantizes_inputs(), want, "{ty}");
        assert!(!m.with_inputs(KquantInputs::F32).quantizes_inputs(), "{ty}");
    }
}

#[test]
fn the_machine_runs_the_simd_path_the_benchmarks_measure() {
    // Not a property of the kernels, but of this test run: on an x86-64 machine with AVX2 and FMA
    // (every machine the figures of docs/PERFORMANCE.md come from), the SIMD properties above ran
    // against the SIMD path, not the scalar path against itself.
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
        let wide = is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl");
        assert_eq!(detected(), if wide { Isa::Avx512 } else { Isa::Avx2 });
    }
    for ty in &TYPES[..7] {
        assert!(has_kernel(*ty), "{ty} has a kernel");
    }
    assert!(!has_kernel(GgmlType::Q4_0) && !has_kernel(GgmlType::Q2_K));
}

#[test]
fn threads_split_rows_without_changing_a_value() {
    // Large enough (≥ PARALLEL_BYTES) to be split: 301 rows of 2 Q4_K blocks, 301 rows of 1000 F16.
    for (ty, rows, cols) in [(GgmlType::Q4_K, 301, 512), (GgmlType::F16, 301, 1000), (GgmlType::Q8_0, 997, 96)] {
        let bytes = weights(ty, rows, cols, &[7, 1, 200, 33]);
        let m = Matrix::new(ty, &bytes, rows, cols).unwrap();
        for batch in [1, 3, MAX_BATCH + 1] {
            let xs: Vec<f32> = (0..batch * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 16.0).collect();
            let mut one = vec![f32::NAN; batch * rows];
            matmat(&m, &xs, batch, &mut one, 1);
            for threads in [2, 3, 7] {
                let mut many = vec![f32::NAN; batch * rows];
                matmat(&m, &xs, batch, &mut many, threads);
                assert_eq!(one, many, "{ty} × {batch} on {threads} threads");
            }
            let mut apart = vec![f32::NAN; batch * rows];
            for (x, out) in xs.chunks_exact(cols).zip(apart.chunks_exact_mut(rows)) {
                matvec(&m, x, out, 1);
            }
            for strategy in [Split::Scoped, Split::Pool] {
                let x: Vec<&[f32]> = xs.chunks_exact(cols).collect();
                let mut many = vec![f32::NAN; batch * rows];
                let mut outs: Vec<&mut [f32]> = many.chunks_exact_mut(rows).collect();
                over_rows_with(strategy, &m, &x, &mut outs, 2, &|part, xs, outs| {
                    for (x, o) in xs.iter().zip(outs.iter_mut()) {
                        matvec(part, x, o, 1);
                    }
                });
                assert_eq!(apart, many, "{ty} × {batch} split by {strategy:?}");
            }
        }
    }
}

// The engine's sigmoid and SiLU (`kernels::activation`): its `e^−|x|` within a few f64 units of
// glibc's `exp`, each f32 value `scalar`'s f64 formula rounded once (one unit off where that
// formula's value is within ~10⁻¹⁵ of a rounding boundary), and every path the portable one.

/// How many f64 units apart `a` and `b` are (both finite and of one sign).
fn units_apart(a: f64, b: f64) -> u64 {
    a.to_bits().abs_diff(b.to_bits())
}

/// Arguments over the range of `exp_neg_abs`: everywhere in `[−708, 0]`, around each multiple of
/// `ln 2 / 2` (where `n` rounds the other way), near 0 and near the underflow cut.
fn exp_arguments() -> Vec<f64> {
    let mut xs: Vec<f64> = (0..200_000).map(|i| -708.0 * f64::from(i) / 200_000.0).collect();
    for k in 0..2_044 {
        let edge = -f64::from(k) * std::f64::consts::LN_2 / 2.0;
        xs.extend((-8..=8).map(|d| edge + f64::from(d) * 1e-12));
    }
    xs.extend((1..60).map(|e| -(2f64.powi(-e))));
    xs.extend((0..100).map(|i| -707.9 - f64::from(i) * 1e-3));
    xs.retain(|&x| (-708.0..=0.0).contains(&x));
    xs
}

#[test]
fn exp_neg_abs_is_within_four_f64_units_of_glibc_exp() {
    let mut worst = (0, 0.0);
    for x in exp_arguments() {
        let apart = units_apart(activation::exp_neg_abs(x), x.exp());
        if apart > worst.0 {
            worst = (apart, x);
        }
        assert_eq!(activation::exp_neg_abs(-x), activation::exp_neg_abs(x), "e^−|x| at ±{x}");
    }
    assert!(worst.0 <= 4, "{} units from glibc at {}", worst.0, worst.1);
    assert_eq!(activation::exp_neg_abs(0.0), 1.0);
    assert_eq!(activation::exp_neg_abs(-708.5), 0.0);
    assert_eq!(activation::exp_neg_abs(f64::NEG_INFINITY), 0.0);
    assert!(activation::exp_neg_abs(f64::NAN).is_nan());
}

/// `f32` values of every magnitude from `2⁻²⁰` to `2²⁰`, both signs, from a fixed stream.
fn f32_arguments(n: usize) -> Vec<f32> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let magnitude = 2f32.powf((state % 40_000) as f32 / 1_000.0 - 20.0);
            if state & (1 << 40) == 0 { magnitude } else { -magnitude }
        })
        .collect()
}

#[test]
fn sigmoid_and_silu_are_the_scalar_formulas_rounded_once() {
    type Pair = (&'static str, fn(f32) -> f32, fn(f64) -> f64);
    let pairs: [Pair; 2] =
        [("sigmoid", activation::sigmoid, scalar::sigmoid), ("silu", activation::silu, scalar::silu)];
    let specials = [0.0, -0.0, 1e-45, -1e-45, f32::MAX, f32::MIN, f32::INFINITY, f32::NEG_INFINITY, 88.0, -104.0];
    for (name, engine, formula) in pairs {
        let mut off = 0;
        for x in f32_arguments(1_000_000) {
            let (got, want) = (engine(x), formula(f64::from(x)) as f32);
            if got != want {
                assert_eq!(got.to_bits().abs_diff(want.to_bits()), 1, "{name}({x}): {got} against {want}");
                off += 1;
            }
        }
        assert!(off <= 10, "{name}: {off} of 1,000,000 values one unit off");
        for x in specials {
            let (got, want) = (engine(x), formula(f64::from(x)) as f32);
            assert!(
                got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                "{name}({x}): {got} against {want}"
            );
        }
        assert!(engine(f32::NAN).is_nan(), "{name}(NaN)");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every path computes each value as the portable path computes it alone, whatever the
    /// slice's length and wherever the value sits in it.
    #[test]
    fn every_activation_path_is_the_one_value_function_bit_for_bit(
        bits in prop::collection::vec(any::<u32>(), 0..70),
    ) {
        let xs: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        type Slice = (fn(Isa, &mut [f32]), fn(f32) -> f32);
        let fns: [Slice; 2] =
            [(activation::silu_all_on, activation::silu), (activation::sigmoid_all_on, activation::sigmoid)];
        for (all_on, one) in fns {
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                let mut got = xs.clone();
                all_on(isa, &mut got);
                for (&g, &x) in got.iter().zip(&xs) {
                    let want = one(x);
                    prop_assert!(g.to_bits() == want.to_bits() || g.is_nan() && want.is_nan(), "{isa:?} at {x}: {g} against {want}");
                }
            }
        }
    }
}
