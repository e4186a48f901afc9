//! Timing helpers the benchmark examples share (included by `#[path]`; not part of the library):
//! medians of wall time, and the cost of streaming values or stored bytes once, the memory bound a
//! step or a kernel is measured against.

#![allow(dead_code)]

use std::hint::black_box;
use std::thread;
use std::time::Instant;

use stepcheck::engine::run::kernels::threads::{PARALLEL_BYTES, pool};

/// The independent accumulators of [`sum`].
const LANES: usize = 16;

/// A slice of at least this many values is summed on several threads.
const PARALLEL_VALUES: usize = 1 << 20;

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

/// `Σ` of `bytes` read as little-endian u64 words (wrapping), with 8 independent accumulators, on
/// this thread: the cost of streaming a stored matrix once, whatever its type. A tail of fewer than
/// 8 bytes is left out.
fn sum_bytes(bytes: &[u8]) -> u64 {
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
/// [`PARALLEL_BYTES`] long.
pub fn par_sum_bytes(bytes: &[u8], threads: usize) -> u64 {
    if threads <= 1 || bytes.len() < PARALLEL_BYTES {
        return sum_bytes(bytes);
    }
    let per = bytes.len().div_ceil(threads);
    let parts: Vec<&[u8]> = bytes.chunks(per).collect();
    let mut sums = vec![0u64; parts.len()];
    let (first, rest) = sums.split_first_mut().expect("at least one part");
    match pool() {
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
