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
