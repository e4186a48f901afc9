//! The matvec kernel: the hot loop of a step, written so that the compiler vectorises it.
//!
//! A dot product keeps [`LANES`] independent f32 accumulators over `chunks_exact`, which the compiler
//! turns into SIMD registers; a large matrix splits its rows over threads (`std::thread::scope`),
//! each thread streaming its own contiguous rows once.

use std::thread;

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

/// `Σ x[i]`, in f32, with [`LANES`] independent accumulators: the cost of streaming `x` once.
pub fn sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let c = x.chunks_exact(LANES);
    let rest = c.remainder();
    for x in c {
        for i in 0..LANES {
            acc[i] += x[i];
        }
    }
    acc.iter().sum::<f32>() + rest.iter().sum::<f32>()
}

/// `out = w · x` for a row-major `w` of `out.len()` rows of `x.len()` values, on this thread.
pub fn matvec<R: Real>(w: &[f32], x: &[R], out: &mut [R]) {
    if x.is_empty() {
        out.fill(R::default());
        return;
    }
    for (o, row) in out.iter_mut().zip(w.chunks_exact(x.len())) {
        *o = dot(row, x);
    }
}

/// `out = w · x` as [`matvec`], with the rows split over up to `threads` threads when `w` holds at
/// least [`PARALLEL_VALUES`] values.
pub(crate) fn par_matvec<R: Real>(w: &[f32], x: &[R], out: &mut [R], threads: usize) {
    let rows = out.len();
    if threads <= 1 || w.len() < PARALLEL_VALUES || rows < 2 || x.is_empty() {
        return matvec(w, x, out);
    }
    let per = rows.div_ceil(threads);
    thread::scope(|s| {
        let mut parts = out.chunks_mut(per).zip(w.chunks(per * x.len()));
        let first = parts.next();
        for (o, w) in parts {
            s.spawn(move || matvec(w, x, o));
        }
        if let Some((o, w)) = first {
            matvec(w, x, o);
        }
    });
}

/// `Σ x[i]` as [`sum`], split over up to `threads` threads: the time to stream `x` once, the bound
/// a matvec over the same values is measured against.
pub fn par_sum(x: &[f32], threads: usize) -> f32 {
    if threads <= 1 || x.len() < PARALLEL_VALUES {
        return sum(x);
    }
    let per = x.len().div_ceil(threads);
    thread::scope(|s| {
        let mut parts = x.chunks(per);
        let first = parts.next();
        let handles: Vec<_> = parts.map(|p| s.spawn(move || sum(p))).collect();
        let mine = first.map_or(0.0, sum);
        mine + handles.into_iter().map(|h| h.join().unwrap_or(f32::NAN)).sum::<f32>()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(w: &[f32], x: &[f32]) -> Vec<f32> {
        w.chunks(x.len()).map(|r| r.iter().zip(x).map(|(a, b)| (*a as f64) * (*b as f64)).sum::<f64>() as f32).collect()
    }

    #[test]
    fn matvec_matches_the_naive_sum_at_every_length_around_the_lanes() {
        for cols in [1, 7, 15, 16, 17, 33, 100] {
            let rows = 5;
            let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
            let x: Vec<f32> = (0..cols).map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0).collect();
            let mut out = vec![0.0; rows];
            matvec(&w, &x, &mut out);
            assert_eq!(out, naive(&w, &x), "cols {cols}");
        }
    }

    #[test]
    fn threads_split_rows_without_changing_a_value() {
        let (rows, cols) = (1031, 1024);
        let w: Vec<f32> = (0..rows * cols).map(|i| ((i % 17) as f32 - 8.0) / 16.0).collect();
        let x: Vec<f32> = (0..cols).map(|i| ((i % 5) as f32 - 2.0) / 2.0).collect();
        let (mut one, mut two) = (vec![0.0; rows], vec![0.0; rows]);
        matvec(&w, &x, &mut one);
        par_matvec(&w, &x, &mut two, 2);
        assert_eq!(one, two);
        assert_eq!(par_sum(&w, 2), par_sum(&w, 2));
    }
}
