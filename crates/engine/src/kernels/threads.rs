//! Threads over rows: a matrix's rows split into contiguous parts, one per thread, each part's
//! outputs written by its own thread alone.
//!
//! Two ways to run the parts are kept, so that the benchmark (`examples/bench_kernels.rs`) can
//! time one against the other: [`Strategy::Scoped`] spawns threads for each matvec
//! (`std::thread::scope`), [`Strategy::Pool`] hands the parts to a persistent pool of workers
//! (rayon's `in_place_scope`, the calling thread running the first part itself). The pool is the
//! default: docs/PERFORMANCE.md has the figures it was chosen on.

use std::sync::OnceLock;

use super::Matrix;

/// How a matrix's parts are run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Threads spawned for each call, joined at its end.
    Scoped,
    /// Persistent workers (rayon), woken for each call.
    Pool,
}

/// The strategy [`super::matmat`] uses.
pub(crate) const DEFAULT: Strategy = Strategy::Pool;

/// A matrix of fewer stored bytes than this, times its batch, runs on the calling thread alone:
/// below it, waking a second thread costs more than the half of the work it takes.
pub const PARALLEL_BYTES: usize = 64 << 10;

/// The work of one part: the rows of `m` (a part of the matrix) against every vector of `xs`, into
/// `outs[b][r]`.
pub type Part<'a> = dyn Fn(&Matrix, &[&[f32]], &mut [&mut [f32]]) + Sync + 'a;

/// How many threads run the parts of one computation ([`each_part`]): the pool's workers and the
/// calling thread.
pub fn parts() -> usize {
    pool().map_or(1, |p| p.current_num_threads() + 1)
}

/// The persistent workers: one fewer than the machine's cores (the calling thread is the last), or
/// none when the system will not start them (a thread limit): the parts then run on the calling
/// thread, one after another, with the same values.
pub fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        rayon::ThreadPoolBuilder::new()
            .num_threads(cores.saturating_sub(1).max(1))
            .thread_name(|i| format!("stepcheck-kernel-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// Runs `work` on each of `jobs` (parts of one computation, each touching only its own data): the
/// first on the calling thread, the others on the persistent workers, all finished on return; one
/// after another where the pool could not start. Where bugs can be planted, each part runs with
/// the calling thread's (`planted`), so that a unit's plant holds on whichever thread runs it.
pub fn each_part<J: Send>(jobs: impl IntoIterator<Item = J>, work: &(dyn Fn(J) + Sync)) {
    #[cfg(any(test, feature = "planted"))]
    let bug = planted::current();
    #[cfg(any(test, feature = "planted"))]
    let work: &(dyn Fn(J) + Sync) = &|job| planted::carried(bug, || work(job));
    let mut jobs = jobs.into_iter();
    let Some(first) = jobs.next() else { return };
    match pool() {
        Some(pool) => pool.in_place_scope(|s| {
            for job in jobs {
                s.spawn(move |_| work(job));
            }
            work(first);
        }),
        None => std::iter::once(first).chain(jobs).for_each(work),
    }
}

/// Runs `part` over `m`'s rows split into up to `threads` contiguous parts of equal rows (one part
/// when the matrix is below [`PARALLEL_BYTES`]), with `strategy`.
pub fn over_rows_with(
    strategy: Strategy,
    m: &Matrix,
    xs: &[&[f32]],
    outs: &mut [&mut [f32]],
    threads: usize,
    part: &Part,
) {
    let work = m.bytes().len().saturating_mul(xs.len().max(1));
    let parts = if work < PARALLEL_BYTES { 1 } else { threads.clamp(1, m.rows().max(1)) };
    if parts == 1 {
        return part(m, xs, outs);
    }
    let per = m.rows().div_ceil(parts);
    let mut split: Vec<Vec<&mut [f32]>> = (0..parts).map(|_| Vec::with_capacity(outs.len())).collect();
    for o in outs.iter_mut() {
        for (t, chunk) in o.chunks_mut(per).enumerate() {
            split[t].push(chunk);
        }
    }
    let mut jobs = split.into_iter().enumerate().map(|(t, outs)| {
        let rows = m.rows_range(t * per..((t + 1) * per).min(m.rows()));
        (rows, outs)
    });
    let Some((first, mut first_outs)) = jobs.next() else { return };
    match strategy {
        Strategy::Scoped => std::thread::scope(|s| {
            for (rows, mut outs) in jobs {
                s.spawn(move || part(&rows, xs, &mut outs));
            }
            part(&first, xs, &mut first_outs);
        }),
        Strategy::Pool => match pool() {
            Some(pool) => pool.in_place_scope(|s| {
                for (rows, mut outs) in jobs {
                    s.spawn(move |_| part(&rows, xs, &mut outs));
                }
                part(&first, xs, &mut first_outs);
            }),
            None => {
                part(&first, xs, &mut first_outs);
                jobs.for_each(|(rows, mut outs)| part(&rows, xs, &mut outs));
            }
        },
    }
}
