//! Timing helpers for the engine's benchmarks (`examples/bench_engine.rs`).

use std::hint::black_box;
use std::time::Instant;

/// The median wall time of `runs` calls of `f` (after one warm-up call), in seconds. `f`'s result
/// is kept from the optimiser.
pub fn median_secs<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    black_box(f());
    let mut times: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// The medians of one matvec shape over `count` distinct matrices in turn (a layer's matrix is
/// read from memory, not from cache, when each of many layers has its own): the matvecs, and
/// streaming the same values once.
#[derive(Clone, Copy, Debug)]
pub struct MatVecTiming {
    pub rows: usize,
    pub cols: usize,
    pub count: usize,
    pub threads: usize,
    /// Seconds per pass of `w · x` over every matrix.
    pub matvec: f64,
    /// Seconds per pass summing every matrix's values.
    pub stream: f64,
}

impl MatVecTiming {
    /// The bytes of one pass over the matrices (f32).
    pub fn bytes(&self) -> f64 {
        (self.count * self.rows * self.cols * 4) as f64
    }

    /// The matvec's time over the streaming time: 1 is the memory bound.
    pub fn ratio(&self) -> f64 {
        self.matvec / self.stream
    }
}

/// Times the engine's matvec over `w`, `count` consecutive `[rows, x.len()]` matrices, against
/// streaming `w` once, each on `threads` threads, as the medians of `runs` passes.
pub fn matvec_vs_stream(w: &[f32], count: usize, x: &[f32], threads: usize, runs: usize) -> MatVecTiming {
    let per = w.len() / count.max(1);
    let rows = per / x.len().max(1);
    let mut out = vec![0.0; rows];
    let matvec = median_secs(runs, || {
        for m in w.chunks_exact(per.max(1)) {
            super::matvec::par_matvec(m, x, &mut out, threads);
        }
        out.first().copied()
    });
    let stream =
        median_secs(runs, || w.chunks_exact(per.max(1)).map(|m| super::matvec::par_sum(m, threads)).sum::<f32>());
    MatVecTiming { rows, cols: x.len(), count, threads, matvec, stream }
}

/// `Σ` of `bytes` read as little-endian u64 words (wrapping), with 8 independent accumulators, on
/// this thread: the cost of streaming a stored matrix once, whatever its type. A tail of fewer than
/// 8 bytes is left out.
pub(crate) fn sum_bytes(bytes: &[u8]) -> u64 {
    let mut acc = [0u64; 8];
    let (words, _) = bytes.as_chunks::<64>();
    for w in words {
        for (i, a) in acc.iter_mut().enumerate() {
            let word: [u8; 8] = w[8 * i..8 * i + 8].try_into().unwrap_or_default();
            *a = a.wrapping_add(u64::from_le_bytes(word));
        }
    }
    acc.iter().fold(0, |s, a| s.wrapping_add(*a))
}

/// [`sum_bytes`] split over up to `threads` threads as the kernels split a matrix (persistent
/// workers, the caller taking the first part), when `bytes` is at least
/// [`super::kernels::threads::PARALLEL_BYTES`] long.
pub fn par_sum_bytes(bytes: &[u8], threads: usize) -> u64 {
    if threads <= 1 || bytes.len() < super::kernels::threads::PARALLEL_BYTES {
        return sum_bytes(bytes);
    }
    let per = bytes.len().div_ceil(threads);
    let parts: Vec<&[u8]> = bytes.chunks(per).collect();
    let mut sums = vec![0u64; parts.len()];
    let (first, rest) = sums.split_first_mut().expect("at least one part");
    match super::kernels::threads::pool() {
        Some(pool) => pool.in_place_scope(|s| {
            for (part, sum) in parts[1..].iter().zip(rest.iter_mut()) {
                s.spawn(move |_| *sum = sum_bytes(part));
            }
            *first = sum_bytes(parts[0]);
        }),
        None => parts.iter().zip(sums.iter_mut()).for_each(|(part, sum)| *sum = sum_bytes(part)),
    }
    sums.iter().fold(0, |s, a| s.wrapping_add(*a))
}
