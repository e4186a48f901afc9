//! The engine's batched step: the states of `B` sequences stepped in one pass over the program's
//! units, each weight matrix read once for all of them.
//!
//! A unit that multiplies by a weight matrix (a matvec, merged rows, merged head halves, the SwiGLU
//! FFN) gathers the rows' input vectors into one `B × cols` block and calls
//! [`kernels::matmat`], which reads each weight row once per [`kernels::MAX_BATCH`] vectors; its
//! outputs are scattered back to each row's buffers and kept as their storage says, exactly as
//! the single-sequence step keeps them. Every other unit (embedding, norms, conv, gates, delta rule,
//! attention, the sigmoid gate, adds, the advance) runs per row, on that row's buffers and state,
//! by the very function the single-sequence step runs; the units between two matrix units run over
//! the rows split among the threads, when the rows' states are large enough to pay for it. The
//! rows share nothing but the weights: each has its own buffers and its own state, so the order in
//! which the rows of one unit run, and the thread that runs them, do not matter, and a row computes
//! what [`EngineRunner::step`] computes on its state, to the bit (the kernels sum a vector's
//! products in one order whatever its batch: `kernels/simd.rs`).

use std::mem;

use super::kernels::{self, Matrix, lines::LineAligned};
use super::plan::Unit;
use super::real::Keep;
use super::{EngineRunner, RunError, RunnerState, check_room, run, scatter, units};

/// One row of a batched step: the state it steps and the token it feeds.
pub struct BatchRow<'s> {
    pub state: &'s mut RunnerState,
    pub token: u32,
}

/// The scratch a batched step keeps between steps: each row's buffers, and one matmat's gathered
/// inputs and outputs.
#[derive(Default)]
pub(super) struct BatchScratch {
    rows: Vec<Vec<Vec<f32>>>,
    pub(super) xs: LineAligned,
    pub(super) outs: LineAligned,
    pub(super) ups: LineAligned,
}

impl EngineRunner<'_, f32> {
    /// One decode step of every row at once, each weight read once for all of them; returns each
    /// row's logits, in row order, borrowed from the runner's scratch until its next step (a step
    /// copies none: 8 rows of a 248K vocabulary would be 8 MB of fresh pages a step). Each row's
    /// state must be of this runner's program ([`RunnerState`]s from [`EngineRunner::fresh_state`]);
    /// a token outside the vocabulary, a state of another layout, or a row at a position the KV
    /// caches have no room for is refused before any state changes. The runner's own carried state
    /// is not touched.
    pub fn step_batch(&mut self, rows: &mut [BatchRow<'_>]) -> Result<Vec<&[f32]>, RunError> {
        for row in rows.iter() {
            if row.token as usize >= self.vocab {
                return Err(RunError::TokenOutOfRange { token: row.token, vocab: self.vocab });
            }
            if !self.store.same_layout(&row.state.0) {
                return Err(RunError::ForeignState);
            }
            check_room(self.attends, row.state.0.position, self.capacity)?;
        }
        let mut scratch = mem::take(&mut self.batch);
        while scratch.rows.len() < rows.len() {
            scratch.rows.push(self.buffers.iter().map(|b| vec![0.0; b.len()]).collect());
        }
        let result = self.pass(rows, &mut scratch);
        self.batch = scratch;
        result?;
        Ok(self.batch.rows[..rows.len()].iter().map(|b| &b[self.logits][..]).collect())
    }

    /// The units in order, each over every row: a matrix unit over all rows at once, and each run
    /// of per-row units between two matrix units over the rows split among the threads.
    fn pass(&mut self, rows: &mut [BatchRow<'_>], scratch: &mut BatchScratch) -> Result<(), RunError> {
        let BatchScratch { rows: bufs, xs, outs, ups } = scratch;
        let bufs = &mut bufs[..rows.len()];
        let mut m = Matmat { xs, outs, ups, threads: self.threads };
        let mut at = 0;
        while at < self.units.len() {
            if Matmat::reads_weights(&self.units[at]) {
                m.unit(&mut self.units[at], bufs, &self.storages);
                at += 1;
                continue;
            }
            let end =
                (at..self.units.len()).find(|&u| Matmat::reads_weights(&self.units[u])).unwrap_or(self.units.len());
            if self.units[at..end].iter().any(|u| matches!(u, Unit::Attention(_))) {
                for row in rows.iter() {
                    check_room(self.attends, row.state.0.position, self.capacity)?;
                }
            }
            self.per_row(at..end, rows, bufs);
            at = end;
        }
        Ok(())
    }

    /// The per-row units `segment` over every row. The rows are split into contiguous parts, one
    /// per thread, when their states are large enough to pay for waking a thread; each further
    /// thread runs its own copy of the units (whose scratch is its own), made once. A row runs
    /// on its own buffers and state by the single step's code whichever thread runs it, so the
    /// split changes no value.
    fn per_row(&mut self, segment: std::ops::Range<usize>, rows: &mut [BatchRow<'_>], bufs: &mut [Vec<Vec<f32>>]) {
        let (storages, threads) = (&self.storages, self.threads);
        let run_rows = |units: &mut [Unit<'_, f32>], rows: &mut [BatchRow<'_>], bufs: &mut [Vec<Vec<f32>>]| {
            for unit in units.iter_mut() {
                for (row, b) in rows.iter_mut().zip(bufs.iter_mut()) {
                    run(unit, b, storages, &mut row.state.0, row.token as usize, threads);
                }
            }
        };
        let work = self.store.values().saturating_mul(rows.len());
        let parts = if work >= self.split_rows_from { self.threads.min(rows.len()) } else { 1 };
        if parts <= 1 {
            return run_rows(&mut self.units[segment], rows, bufs);
        }
        while self.spare_units.len() < parts - 1 {
            self.spare_units.push(self.units.clone());
        }
        let per = rows.len().div_ceil(parts);
        let units = std::iter::once(&mut self.units).chain(self.spare_units.iter_mut());
        let jobs = units.zip(rows.chunks_mut(per).zip(bufs.chunks_mut(per)));
        kernels::threads::each_part(jobs, &|(units, (rows, bufs))| run_rows(&mut units[segment.clone()], rows, bufs));
    }
}

/// The fewest state values (over all the rows of a batched step) for which its per-row units are
/// split among threads: below it, waking a thread costs more than the half of the work it takes.
pub(super) const PARALLEL_STATE_VALUES: usize = 1 << 18;

/// The matrix units of a batched step over their gathered scratch.
pub(super) struct Matmat<'s> {
    pub(super) xs: &'s mut LineAligned,
    pub(super) outs: &'s mut LineAligned,
    pub(super) ups: &'s mut LineAligned,
    pub(super) threads: usize,
}

/// `out = m · x` for every row's `x` (gathered from the rows' buffers `x` into `xs`, one after
/// another), into `out` (`rows × m.rows()`, row-major).
fn matmat(m: &Matrix, bufs: &[Vec<Vec<f32>>], x: usize, xs: &mut LineAligned, out: &mut LineAligned, threads: usize) {
    let gathered = xs.zeroed(bufs.iter().map(|b| b[x].len()).sum());
    let mut at = 0;
    for b in bufs {
        gathered[at..at + b[x].len()].copy_from_slice(&b[x]);
        at += b[x].len();
    }
    kernels::matmat(m, xs.values(), bufs.len(), out.zeroed(bufs.len() * m.rows()), threads);
}

/// `units::glu` over a batch's gathered FFN values, split among the threads when there are many
/// (each value is the same function of its own two inputs, wherever it runs).
fn glu(hidden: &mut [f32], up: &[f32], threads: usize) {
    if hidden.len() < PARALLEL_GLU_VALUES || threads <= 1 {
        return units::glu(hidden, up);
    }
    let per = hidden.len().div_ceil(threads);
    kernels::threads::each_part(hidden.chunks_mut(per).zip(up.chunks(per)), &|(hidden, up)| units::glu(hidden, up));
}

/// The fewest FFN values for which [`glu`] splits them among threads (each costs an `exp`).
const PARALLEL_GLU_VALUES: usize = 1 << 14;

impl Matmat<'_> {
    /// Whether `unit` multiplies by a weight matrix (and so runs over all rows at once).
    pub(super) fn reads_weights(unit: &Unit<'_, f32>) -> bool {
        matches!(
            unit,
            Unit::MatVec { .. } | Unit::MergedRows { .. } | Unit::MergedHeadHalves { .. } | Unit::SwiGlu { .. }
        )
    }

    /// Runs the matrix unit `unit` over every row (a unit that runs per row is left as it is).
    pub(super) fn unit(&mut self, unit: &mut Unit<'_, f32>, bufs: &mut [Vec<Vec<f32>>], st: &[Keep]) {
        let threads = self.threads;
        match unit {
            Unit::MatVec { weight, x, out } => {
                matmat(weight, bufs, *x, self.xs, self.outs, threads);
                let n = weight.rows();
                for (b, o) in bufs.iter_mut().zip(self.outs.values().chunks_exact(n)) {
                    b[*out].copy_from_slice(o);
                    units::store(st[*out], &mut b[*out]);
                }
            }
            Unit::MergedRows { weight, x, outs, rows } => {
                let m = weight.rows_range(0..rows.len());
                matmat(&m, bufs, *x, self.xs, self.outs, threads);
                for (b, o) in bufs.iter_mut().zip(self.outs.values().chunks_exact(rows.len())) {
                    scatter(b, st, outs, o);
                }
            }
            Unit::MergedHeadHalves { weight, head_dim, x, first, second, .. } => {
                matmat(weight, bufs, *x, self.xs, self.outs, threads);
                for (b, o) in bufs.iter_mut().zip(self.outs.values().chunks_exact(weight.rows())) {
                    let (mut f, mut s) = (mem::take(&mut b[*first]), mem::take(&mut b[*second]));
                    units::split_head_halves(*head_dim, o, &mut f, &mut s);
                    units::store(st[*first], &mut f);
                    units::store(st[*second], &mut s);
                    (b[*first], b[*second]) = (f, s);
                }
            }
            Unit::SwiGlu { x, gate, up, down, out, .. } => {
                matmat(gate, bufs, *x, self.xs, self.outs, threads);
                matmat(up, bufs, *x, self.xs, self.ups, threads);
                glu(self.outs.values_mut(), self.ups.values(), threads);
                let n = down.rows();
                kernels::matmat(down, self.outs.values(), bufs.len(), self.xs.zeroed(bufs.len() * n), threads);
                for (b, o) in bufs.iter_mut().zip(self.xs.values().chunks_exact(n)) {
                    b[*out].copy_from_slice(o);
                    units::store(st[*out], &mut b[*out]);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_programs::programs;
    use lower::{lower_graph, shim::EngineShim};
    use model::{author::decode_step, presets, random::random_checkpoint};
    use program::Numerics;

    /// A batch of one row is the single-sequence step, to the bit: the same logits and state.
    #[test]
    fn a_batch_of_one_row_is_the_single_step() -> Result<(), RunError> {
        for (name, program, ckpt) in programs() {
            let mut batched = EngineRunner::new(&program, &ckpt, 8)?;
            let mut single = EngineRunner::new(&program, &ckpt, 8)?;
            let mut state = batched.fresh_state();
            for (step, token) in [3u32, 9, 1, 30].into_iter().enumerate() {
                let got = batched.step_batch(&mut [BatchRow { state: &mut state, token }])?;
                let want = single.step(token)?;
                assert_eq!(got, [want], "{name}: step {step}: logits");
                assert_eq!(state.snapshot(), single.state(), "{name}: step {step}: state");
            }
        }
        Ok(())
    }

    /// A row computes the same whatever the other rows of its batch hold: the same logits and state,
    /// to the bit, next to other states at other positions fed other tokens. (That it is also the
    /// single step's row, to the bit, `tests/batch.rs` states, and the batched check checks.)
    #[test]
    fn a_row_of_a_batch_does_not_depend_on_the_other_rows() -> Result<(), RunError> {
        for (name, program, ckpt) in programs() {
            let mut runner = EngineRunner::new(&program, &ckpt, 8)?;
            let fresh = runner.fresh_state();
            let (mut a, mut b) = (fresh.clone(), fresh.clone());
            let (mut others_a, mut others_b) = (vec![fresh.clone(); 2], vec![fresh.clone(); 2]);
            // Row 0 decodes 1, 2, 3, 4 in both batches of three; its companions decode other
            // tokens, and one of the second batch's is a step ahead.
            runner.step_batch(&mut [BatchRow { state: &mut others_b[1], token: 5 }])?;
            for step in 0..4u32 {
                let token = step + 1;
                let (o1, o2) = others_a.split_at_mut(1);
                let mut rows = [
                    BatchRow { state: &mut a, token },
                    BatchRow { state: &mut o1[0], token: 20 + step },
                    BatchRow { state: &mut o2[0], token: 7 },
                ];
                let got_a = runner.step_batch(&mut rows)?[0].to_vec();
                let (p1, p2) = others_b.split_at_mut(1);
                let mut rows = [
                    BatchRow { state: &mut b, token },
                    BatchRow { state: &mut p1[0], token: 31 - step },
                    BatchRow { state: &mut p2[0], token: 11 },
                ];
                let got_b = runner.step_batch(&mut rows)?[0].to_vec();
                assert_eq!(got_a, got_b, "{name}: step {step}: logits");
                assert_eq!(a.snapshot(), b.snapshot(), "{name}: step {step}: state");
            }
        }
        Ok(())
    }

    #[test]
    fn a_row_the_caches_have_no_room_for_is_refused_before_any_state_changes() -> Result<(), RunError> {
        let spec = presets::preset("tiny").expect("a preset");
        let graph = EngineShim::default().prepare(&decode_step(&spec).expect("a graph"));
        let program = lower_graph(&graph, Numerics::F32).expect("a program");
        let ckpt = random_checkpoint(&spec, 3);
        let mut runner = EngineRunner::new(&program, &ckpt, 1)?;
        let (mut a, mut b) = (runner.fresh_state(), runner.fresh_state());
        runner.step_batch(&mut [BatchRow { state: &mut b, token: 1 }])?;
        let before = (a.snapshot(), b.snapshot());
        let e = runner.step_batch(&mut [BatchRow { state: &mut a, token: 1 }, BatchRow { state: &mut b, token: 2 }]);
        assert_eq!(e, Err(RunError::CapacityExceeded { position: 1, capacity: 1 }));
        assert_eq!((a.snapshot(), b.snapshot()), before);
        let e = runner.step_batch(&mut [BatchRow { state: &mut a, token: 1 << 20 }]);
        assert!(matches!(e, Err(RunError::TokenOutOfRange { .. })));
        Ok(())
    }
}
