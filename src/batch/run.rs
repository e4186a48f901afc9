//! The batched engine interpreter: runs a slot plan on a pool of engine states.
//!
//! It is `engine::run`'s machinery, one state per slot: the pool holds a [`RunnerState`] per slot.
//! Padding rows run on a fresh scratch state. It does not use the reference interpreter.
//!
//! Like [`EngineRunner`], it is written once over the engine's arithmetic ([`BatchArithmetic`], a
//! [`Real`]): `f32` with the program's storage types is the engine ([`BatchRunner::new`]); the
//! check runs the same plan in f64 with every stored value kept exactly
//! ([`BatchRunner::with_arithmetic`]), and the engine's with every sequence's row stepped alone and
//! shown to an observer ([`BatchRunner::run_observed`]), as `check` runs one sequence.
//!
//! Each storage keeps up to `snapshots` earlier states (whole copies, newest first), taken before
//! each of its rows; a restore by `n` takes the `n`-th back. (For a KV cache a truncation would do;
//! for a recurrent state only a copy can.) A slot names a storage: its own, or after a
//! [`SlotOp::Share`] another slot's.
//!
//! A step whose rows share no storage (and address conv windows by slot) runs as one batched step
//! in the engine's f32 ([`EngineRunner::step_batch`]): each weight is read once for all rows, and
//! each row computes what its single step would (to the bit once the kernels' summation order of a
//! vector does not depend on the batch's size: `tests/batch.rs` states it). In any other
//! arithmetic such a step runs its rows one after another. A step whose rows share storage (a fork
//! that shared, or conv windows addressed by row) runs its rows one after another in every
//! arithmetic, the order the plan's semantics give, since a later row must see what an earlier one
//! wrote: each row's state is swapped into one [`EngineRunner`] (moves, not copies), stepped, and
//! swapped back.

use std::collections::VecDeque;

use crate::engine::program::prefill::Prefill;
use crate::engine::run::prefill::{Outputs, TokenObserver};

use super::plan::{Row, SlotOp, SlotPlan};
use super::{BatchError, BatchProgram, StateIndex};
use crate::engine::run::kernels::threads;
use crate::engine::run::{BatchRow, EngineRunner, EngineState, Real, Rounding, RunError, RunnerState, StepObserver};
use crate::model::checkpoint::Checkpoint;

/// An arithmetic the batched interpreter runs in: a [`Real`], and how it steps the rows of a step
/// that share no storage. The rule it keeps: each row computes what its single step
/// ([`EngineRunner::step`]) computes on its state, whichever way the rows are run. Row after row
/// (every arithmetic but f32) keeps it by construction; the engine's batched step keeps it to the
/// bit only when the kernels' summation order of a vector does not depend on the batch's size,
/// which `tests/batch.rs` (`a_row_of_a_batched_step_is_its_single_step_to_the_bit`) requires.
pub trait BatchArithmetic: Real {
    /// Steps every row's state on its token and returns each row's logits, in row order; the
    /// states are distinct. By default one row after another: each state swapped into `runner`,
    /// stepped, and swapped back.
    fn step_apart(
        runner: &mut EngineRunner<'_, Self>,
        rows: &mut [ApartRow<'_, Self>],
    ) -> Result<Vec<Vec<Self>>, RunError> {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows.iter_mut() {
            runner.swap_state(row.state)?;
            let logits = runner.step(row.token);
            runner.swap_state(row.state)?;
            out.push(logits?);
        }
        Ok(out)
    }

    /// Runs `prefill` of `tokens` on the runner's carried state and returns the last token's
    /// logits (as the one row of its step). By default by the prefill's meaning, each matrix
    /// token after token.
    fn prefill_last(
        runner: &mut EngineRunner<'_, Self>,
        prefill: &Prefill,
        tokens: &[u32],
    ) -> Result<Vec<Vec<Self>>, RunError> {
        runner.prefill_unbatched(prefill, tokens, Outputs::Last)
    }
}

/// A prefill's watched tokens shown to a row observer as the one row of its step.
struct EachToken<'o, O> {
    observer: &'o mut O,
    step: usize,
}

impl<R, O: RowObserver<R>> StepObserver<R> for EachToken<'_, O> {
    fn before(&mut self, command: usize, view: &crate::engine::run::StepView<'_, R>) {
        self.observer.before(command, view);
    }

    fn after(&mut self, command: usize, view: &crate::engine::run::StepView<'_, R>) {
        self.observer.after(command, view);
    }
}

impl<R, O: RowObserver<R>> TokenObserver<R> for EachToken<'_, O> {
    fn token(&mut self, _: usize, _: usize, _: usize) {
        self.observer.row(self.step, 0);
    }
}

/// One row of a step whose rows share no storage: the state it steps and the token it feeds.
pub struct ApartRow<'s, R> {
    pub state: &'s mut RunnerState<R>,
    pub token: u32,
}

/// The engine: the rows in one batched step, each weight read once for all of them.
impl BatchArithmetic for f32 {
    fn step_apart(
        runner: &mut EngineRunner<'_, f32>,
        rows: &mut [ApartRow<'_, f32>],
    ) -> Result<Vec<Vec<f32>>, RunError> {
        let mut batch: Vec<BatchRow<'_>> =
            rows.iter_mut().map(|r| BatchRow { state: &mut *r.state, token: r.token }).collect();
        Ok(runner.step_batch(&mut batch)?.into_iter().map(<[f32]>::to_vec).collect())
    }

    /// The engine's prefill: each matrix read once per chunk.
    fn prefill_last(
        runner: &mut EngineRunner<'_, f32>,
        prefill: &Prefill,
        tokens: &[u32],
    ) -> Result<Vec<Vec<f32>>, RunError> {
        runner.prefill(prefill, tokens, Outputs::Last)
    }
}

/// The structure's exact run: the rows one after another.
impl BatchArithmetic for f64 {}

/// A [`StepObserver`] of a batched run's rows: told which step and row a sequence's row is before
/// its step runs. Padding rows, which no sequence reads, are not shown.
pub(crate) trait RowObserver<R>: StepObserver<R> {
    /// Row `row` of the plan's step `step` (counting the plan's `Step` ops) runs next.
    fn row(&mut self, step: usize, row: usize);
}

impl<R> RowObserver<R> for () {
    fn row(&mut self, _: usize, _: usize) {}
}

/// Why a batched run could not start or finish.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BatchRunError {
    #[error("{0}")]
    Plan(#[from] BatchError),
    #[error("the engine interpreter: {0}")]
    Engine(#[from] RunError),
}

/// A storage of the pool: a state and its snapshots, newest first.
struct Held<R> {
    state: RunnerState<R>,
    snaps: VecDeque<RunnerState<R>>,
}

impl<R: Real> Clone for Held<R> {
    fn clone(&self) -> Self {
        Held { state: self.state.clone(), snaps: self.snaps.clone() }
    }
}

impl<R: Real> Held<R> {
    /// Keeps a copy of the state as the newest snapshot, at most `keep` of them: once `keep` are
    /// held, the oldest one's buffers take the copy.
    fn snapshot(&mut self, keep: usize) {
        let recycled = if self.snaps.len() >= keep { self.snaps.pop_back() } else { None };
        let snap = match recycled {
            Some(mut old) => {
                old.clone_from(&self.state);
                old
            }
            None => self.state.clone(),
        };
        self.snaps.push_front(snap);
        self.snaps.truncate(keep);
    }
}

/// Each of `held` (distinct storages, each of states of `values` values) snapshotted
/// ([`Held::snapshot`]), split among the kernels' threads (the pool's workers and this one) when
/// there is enough to copy: each copy is its own storage's, wherever it runs.
fn snapshot_all<R: Real>(held: &mut [&mut Held<R>], keep: usize, values: usize) {
    if held.len() < 2 || values.saturating_mul(held.len()) < PARALLEL_COPY_VALUES {
        return held.iter_mut().for_each(|h| h.snapshot(keep));
    }
    let parts = threads::parts().min(held.len());
    let per = held.len().div_ceil(parts);
    threads::each_part(held.chunks_mut(per), &|part: &mut [&mut Held<R>]| {
        part.iter_mut().for_each(|h| h.snapshot(keep))
    });
}

/// The fewest state values, over a step's rows, for which [`snapshot_all`] splits the copies.
const PARALLEL_COPY_VALUES: usize = 1 << 18;

/// What a plan's steps returned: the logits of every row of every step, padding rows included.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchRun<R = f32> {
    pub logits: Vec<Vec<Vec<R>>>,
}

/// A batched program ready to run on a checkpoint it borrows: one engine runner in the arithmetic
/// `R` and a pool of slot states, all at the start state.
pub struct BatchRunner<'c, R: BatchArithmetic = f32> {
    runner: EngineRunner<'c, R>,
    fresh: RunnerState<R>,
    store: Vec<Held<R>>,
    storage_of: Vec<usize>,
    snapshots: usize,
    conv_index: StateIndex,
    pool: BatchProgram,
    /// Which slots a sequence has left (`SlotOp::Free`): where the planted
    /// [`crate::planted::Bug::BatchResetSkippedOnReuse`] skips a claim's reset.
    #[cfg(any(test, feature = "planted"))]
    freed: Vec<bool>,
}

impl<'c> BatchRunner<'c, f32> {
    /// A runner of `pool` on `checkpoint`, the engine (f32, the program's storage types): the
    /// engine's checks of the program, then the pool's.
    pub fn new(pool: &BatchProgram, checkpoint: &'c Checkpoint) -> Result<BatchRunner<'c, f32>, BatchRunError> {
        BatchRunner::with_arithmetic(pool, checkpoint, Rounding::Stored)
    }
}

impl<'c, R: BatchArithmetic> BatchRunner<'c, R> {
    /// A runner as [`BatchRunner::new`] that computes in `R` and treats every stored value as
    /// `rounding` says ([`EngineRunner::with_arithmetic`]).
    pub fn with_arithmetic(
        pool: &BatchProgram,
        checkpoint: &'c Checkpoint,
        rounding: Rounding,
    ) -> Result<BatchRunner<'c, R>, BatchRunError> {
        pool.validate()?;
        let runner = EngineRunner::with_arithmetic(&pool.program, checkpoint, pool.capacity, rounding)?;
        let fresh = runner.fresh_state();
        let held = Held { state: fresh.clone(), snaps: VecDeque::new() };
        Ok(BatchRunner {
            runner,
            store: vec![held; pool.slots],
            fresh,
            storage_of: (0..pool.slots).collect(),
            snapshots: pool.snapshots,
            conv_index: pool.conv_index,
            pool: pool.clone(),
            #[cfg(any(test, feature = "planted"))]
            freed: vec![false; pool.slots],
        })
    }

    /// Runs large matvecs on up to `threads` threads (see [`EngineRunner::with_threads`]).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.runner = self.runner.with_threads(threads);
        self
    }

    /// Runs `plan` after validating it against the pool, and returns every step's logits.
    pub fn run(&mut self, plan: &SlotPlan) -> Result<BatchRun<R>, BatchRunError> {
        self.drive(plan, None::<&mut ()>)
    }

    /// [`BatchRunner::run`] with every row stepped alone, one after another, and each sequence's
    /// row shown to `observer` (its step and row first, [`RowObserver::row`]). A row computes what
    /// it computes in a batched step (the kernels' rule, [`BatchArithmetic`]), so what `observer`
    /// sees is what [`BatchRunner::run`] computes.
    pub(crate) fn run_observed(
        &mut self,
        plan: &SlotPlan,
        observer: &mut impl RowObserver<R>,
    ) -> Result<BatchRun<R>, BatchRunError> {
        self.drive(plan, Some(observer))
    }

    fn drive<O: RowObserver<R>>(
        &mut self,
        plan: &SlotPlan,
        mut observer: Option<&mut O>,
    ) -> Result<BatchRun<R>, BatchRunError> {
        plan.validate(&self.pool)?;
        let mut logits = Vec::with_capacity(plan.steps());
        for op in &plan.ops {
            match *op {
                SlotOp::Claim { slot } => self.storage_of[slot] = slot,
                SlotOp::Zero { slot } => {
                    // The planted bug: a slot a sequence has left keeps what it held when claimed again.
                    #[cfg(any(test, feature = "planted"))]
                    if self.freed[slot] && crate::planted::is(crate::planted::Bug::BatchResetSkippedOnReuse) {
                        continue;
                    }
                    let h = &mut self.store[self.storage_of[slot]];
                    h.state = self.fresh.clone();
                    h.snaps.clear();
                }
                SlotOp::Copy { from, to } => {
                    let copy = self.store[self.storage_of[from]].clone();
                    #[cfg(any(test, feature = "planted"))]
                    let copy = self.planted_fork(from, copy)?;
                    self.store[self.storage_of[to]] = copy;
                }
                SlotOp::Share { from, to } => self.storage_of[to] = self.storage_of[from],
                #[cfg(any(test, feature = "planted"))]
                SlotOp::Free { slot } => self.freed[slot] = true,
                #[cfg(not(any(test, feature = "planted")))]
                SlotOp::Free { .. } => {}
                SlotOp::Restore { slot, back } => {
                    let h = &mut self.store[self.storage_of[slot]];
                    let back = back.min(h.snaps.len());
                    if back > 0 {
                        h.state = h.snaps[back - 1].clone();
                        h.snaps.drain(..back);
                    }
                }
                SlotOp::Prefill { slot, ref tokens, chunk } => {
                    let step = logits.len();
                    let prefill = Prefill::chunked(tokens.len(), chunk).map_err(RunError::Prefill)?;
                    let h = &mut self.store[self.storage_of[slot]];
                    self.runner.swap_state(&mut h.state)?;
                    let out = match observer.as_deref_mut() {
                        Some(o) => {
                            let mut each = EachToken { observer: o, step };
                            self.runner
                                .prefill_observed(&prefill, tokens, &mut each)
                                .map(|mut l| l.split_off(l.len() - 1))
                        }
                        None => R::prefill_last(&mut self.runner, &prefill, tokens),
                    };
                    let h = &mut self.store[self.storage_of[slot]];
                    self.runner.swap_state(&mut h.state)?;
                    h.snaps.clear();
                    logits.push(out?);
                }
                SlotOp::Step { ref rows } => {
                    let step = logits.len();
                    let out = match (self.apart(rows), observer.as_deref_mut()) {
                        (Some(at), None) => self.at_once(rows, &at)?,
                        (_, mut observer) => {
                            let mut out = Vec::with_capacity(rows.len());
                            for (r, row) in rows.iter().enumerate() {
                                let logits = match (&mut observer, row.slot) {
                                    (Some(o), Some(_)) => {
                                        o.row(step, r);
                                        self.row(r, row.slot, row.token, &mut **o)?
                                    }
                                    _ => self.row(r, row.slot, row.token, &mut ())?,
                                };
                                out.push(logits);
                            }
                            out
                        }
                    };
                    logits.push(out);
                }
            }
        }
        Ok(BatchRun { logits })
    }

    /// `copy`, the copy of slot `from`'s storage a fork makes, as the planted
    /// [`crate::planted::Bug::BatchForkCopiesWrongConv`] makes it: its conv windows those of the
    /// next slot, `(from + 1) % slots`, the rest the parent's (moved in through the runner: its
    /// state swapped for the copy's, its conv windows for that slot's, and back). Without the bug,
    /// `copy` as it is.
    #[cfg(any(test, feature = "planted"))]
    fn planted_fork(&mut self, from: usize, mut copy: Held<R>) -> Result<Held<R>, RunError> {
        if !crate::planted::is(crate::planted::Bug::BatchForkCopiesWrongConv) {
            return Ok(copy);
        }
        let mut other = self.store[self.storage_of[(from + 1) % self.storage_of.len()]].state.clone();
        self.runner.swap_state(&mut copy.state)?;
        self.runner.swap_conv_windows(&mut other)?;
        self.runner.swap_state(&mut copy.state)?;
        Ok(copy)
    }

    /// The storage of each row (`None` for padding) when the rows share no storage and the conv
    /// windows are addressed by slot: then the rows are independent and run as one batched step.
    fn apart(&self, rows: &[Row]) -> Option<Vec<Option<usize>>> {
        if self.conv_index != StateIndex::Slot {
            return None;
        }
        let at: Vec<Option<usize>> = rows.iter().map(|r| r.slot.map(|s| self.storage_of[s])).collect();
        let shared = at.iter().enumerate().any(|(i, a)| a.is_some() && at[..i].contains(a));
        (!shared).then_some(at)
    }

    /// The rows of a step that share no storage ([`BatchArithmetic::step_apart`]: in the engine's
    /// f32 one batched step, each weight read once for all of them), each row's storage
    /// snapshotted first; padding rows on fresh scratch states. With no storage shared, this is
    /// the rows one after another.
    fn at_once(&mut self, rows: &[Row], at: &[Option<usize>]) -> Result<Vec<Vec<R>>, RunError> {
        let mut rows_held: Vec<&mut Held<R>> =
            self.store.iter_mut().enumerate().filter(|(i, _)| at.contains(&Some(*i))).map(|(_, h)| h).collect();
        snapshot_all(&mut rows_held, self.snapshots, self.fresh.len());
        let mut scratch: Vec<RunnerState<R>> = at.iter().filter(|a| a.is_none()).map(|_| self.fresh.clone()).collect();
        let mut pads = scratch.iter_mut();
        let mut held: Vec<Option<&mut RunnerState<R>>> = self.store.iter_mut().map(|h| Some(&mut h.state)).collect();
        let mut batch = Vec::with_capacity(rows.len());
        for (row, a) in rows.iter().zip(at) {
            let state = match a {
                Some(i) => held.get_mut(*i).and_then(Option::take),
                None => pads.next(),
            };
            // Never taken: `apart` found the storages distinct, and each padding row has a scratch.
            let Some(state) = state else { return Err(RunError::ForeignState) };
            batch.push(ApartRow { state, token: row.token });
        }
        R::step_apart(&mut self.runner, &mut batch)
    }

    /// One row: its slot's state (or a fresh scratch one) swapped in, snapshotted, stepped, swapped
    /// back; its conv windows from the storage its conv index names.
    fn row(
        &mut self,
        r: usize,
        slot: Option<usize>,
        token: u32,
        observer: &mut impl StepObserver<R>,
    ) -> Result<Vec<R>, RunError> {
        let at = slot.map(|s| self.storage_of[s]);
        let conv_at = match self.conv_index {
            StateIndex::Slot => at,
            StateIndex::Row => Some(self.storage_of[r]),
        };
        // A padding row's scratch state, fresh for each padding row (none for a slot's row).
        let mut scratch: Option<RunnerState<R>> = at.is_none().then(|| self.fresh.clone());
        match (at, scratch.as_mut()) {
            (Some(i), _) => {
                let h = &mut self.store[i];
                h.snapshot(self.snapshots);
                self.runner.swap_state(&mut h.state)?;
            }
            (None, Some(s)) => self.runner.swap_state(s)?,
            (None, None) => {}
        }
        let apart = conv_at.filter(|&c| Some(c) != at);
        if let Some(c) = apart {
            self.runner.swap_conv_windows(&mut self.store[c].state)?;
        }
        let logits = self.runner.step_observed(token, observer);
        if let Some(c) = apart {
            self.runner.swap_conv_windows(&mut self.store[c].state)?;
        }
        match (at, scratch.as_mut()) {
            (Some(i), _) => self.runner.swap_state(&mut self.store[i].state)?,
            (None, Some(s)) => self.runner.swap_state(s)?,
            (None, None) => {}
        }
        logits
    }

    /// The state slot `slot` names, in the engine's layouts.
    pub(crate) fn slot_state(&self, slot: usize) -> Option<EngineState<R>> {
        let i = *self.storage_of.get(slot)?;
        Some(self.store[i].state.snapshot())
    }
}

#[cfg(test)]
mod tests {
    //! The planted batch bugs change what the batched engine computes on a plan that reaches them,
    //! and nothing before it does.

    use super::*;
    use crate::batch::plan::lower_schedule;
    use crate::engine::run::StateValue;
    use crate::engine::{Numerics, lower::lower_graph, shim::EngineShim};
    use crate::model::{author::decode_step, presets, random::random_checkpoint};
    use crate::planted::{self, Bug};

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    /// The tiny preset's pool of `slots` slots and batches of `batch` (2 snapshots, 16 positions),
    /// `schedule` run on it with `bug` planted if any: every step's logits, and each slot's state.
    fn run(schedule: &str, slots: usize, batch: usize, bug: Option<Bug>) -> Result<(BatchRun, Vec<EngineState>)> {
        let spec = presets::preset("tiny").ok_or("no such preset")?;
        let graph = EngineShim::default().prepare(&decode_step(&spec)?);
        let pool = BatchProgram::new(lower_graph(&graph, Numerics::F32)?, slots, batch, 2, 16)?;
        let ckpt = random_checkpoint(&spec, 1);
        let plan = lower_schedule(&schedule.parse()?, &pool)?.plan;
        let go = || -> Result<_> {
            let mut runner = BatchRunner::new(&pool, &ckpt)?;
            let logits = runner.run(&plan)?;
            let states =
                (0..slots).map(|s| runner.slot_state(s).ok_or("a slot")).collect::<std::result::Result<_, _>>()?;
            Ok((logits, states))
        };
        match bug {
            Some(bug) => planted::with(bug, go),
            None => go(),
        }
    }

    #[test]
    fn the_planted_skipped_reset_leaves_a_reused_slot_as_its_last_sequence_left_it() -> Result<()> {
        // s1 reuses s0's slot and feeds s0's first token: clean, its step is s0's first step; with
        // the reset skipped, it continues s0's state. The first claim still starts from zero.
        let schedule = "admit s0 @0\ndecode s0=3\ndecode s0=5\nfinish s0\nadmit s1 @0\ndecode s1=3\n";
        let (clean, _) = run(schedule, 1, 1, None)?;
        let (planted, _) = run(schedule, 1, 1, Some(Bug::BatchResetSkippedOnReuse))?;
        assert_eq!(clean.logits[2], clean.logits[0], "clean: the reused slot starts from zero");
        assert_eq!(planted.logits[..2], clean.logits[..2], "before the reuse");
        assert_ne!(planted.logits[2], clean.logits[2], "after the reuse");
        Ok(())
    }

    #[test]
    fn the_planted_fork_gives_the_child_the_next_slots_conv_windows_and_the_parents_rest() -> Result<()> {
        let fork = "admit s0 @0\nadmit s1 @1\ndecode s0=3 s1=9\nfork s0 -> s2 @2\n";
        let (_, states) = run(fork, 3, 2, Some(Bug::BatchForkCopiesWrongConv))?;
        let (parent, next, child) = (&states[0], &states[1], &states[2]);
        let mut convs = 0;
        for ((p, n), c) in parent.states.iter().zip(&next.states).zip(&child.states) {
            if matches!(c.value, StateValue::ConvWindow { .. }) {
                assert_eq!(c.value, n.value, "{}: the next slot's conv window", c.name);
                assert_ne!(c.value, p.value, "{}: not the parent's", c.name);
                convs += 1;
            } else {
                assert_eq!(c.value, p.value, "{}: the parent's", c.name);
            }
        }
        assert!(convs > 0, "the preset has conv windows");
        // Decoding on: the child's row moves, the other sequence's does not.
        let schedule = format!("{fork}decode s2=1 s1=4\n");
        let (clean, _) = run(&schedule, 3, 2, None)?;
        let (planted, _) = run(&schedule, 3, 2, Some(Bug::BatchForkCopiesWrongConv))?;
        assert_eq!(planted.logits[0], clean.logits[0], "before the fork");
        assert_ne!(planted.logits[1][0], clean.logits[1][0], "the child's row");
        assert_eq!(planted.logits[1][1], clean.logits[1][1], "the other sequence's row");
        Ok(())
    }
}
