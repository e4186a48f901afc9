//! The portable dot product: every arithmetic's matvec but the engine's f32 kernels
//! ([`super::kernels`]) sums its products as written here.

use super::real::Real;

/// The independent accumulators of a dot product.
pub(crate) const LANES: usize = 16;

/// A matrix with at least this many values is split over threads.
pub const PARALLEL_VALUES: usize = 1 << 20;

/// `Σ a[i]·b[i]` over the common length, in `R`, with [`LANES`] independent accumulators summed in
/// order at the end (a pairwise tree here makes the compiler choose 2-wide vectors: 1.7× slower).
/// `a` may be weights (f32, widened exactly) or values of `R`.
pub fn dot<W: Copy, R: Real + From<W>>(a: &[W], b: &[R]) -> R {
    R::dot(a, b)
}

/// [`dot`] itself, for a [`Real`] that computes it as it is written here.
pub fn lanes<W: Copy, R: Real + From<W>>(a: &[W], b: &[R]) -> R {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let rest = |a: &[W], b: &[R]| a.iter().zip(b).map(|(&x, &y)| R::from(x) * y).sum::<R>();
    if n < LANES {
        // The same sum as below with no chunk: the accumulators' total is that of `LANES` zeros,
        // which the compiler folds for a float instead of adding them up for each short product
        // (a conv's few taps).
        return [R::default(); LANES].iter().copied().sum::<R>() + rest(a, b);
    }
    let mut acc = [R::default(); LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += R::from(x[i]) * y[i];
        }
    }
    acc.iter().copied().sum::<R>() + rest(ra, rb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dot_product_is_the_exact_sum_at_every_length_around_the_lanes() {
        // Products and partial sums of these values are exact in f32: any order gives the same sum.
        for n in [0, 1, 7, 15, 16, 17, 33, 100] {
            let a: Vec<f32> = (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0).collect();
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            assert_eq!(f64::from(lanes(&a, &b)), exact, "length {n}");
        }
    }
}
