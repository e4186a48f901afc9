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
