//! The batched check: the engine interpreter runs the whole plan on its slot pool; the reference
//! interpreter runs each sequence alone, from the zero state, over the history the schedule gives
//! it (a fork's child continues its parent's history; a rollback drops the last `n` tokens).
//!
//! Every row of every step that belongs to a sequence is compared (its logits), then the state of
//! every sequence live at the end, mapped from the engine's layouts to the reference's by
//! [`crate::check::mapped`], with the tolerance of [`crate::check::tolerance`]. The verdict names
//! the sequence, the step, the tensor, the index and both values of the first tensor out of
//! tolerance (its worst value), or the refusal of an invalid schedule or plan.

use std::collections::HashMap;
use std::fmt;

use super::plan::{Lowered, lower_schedule};
use super::run::{BatchRunError, BatchRunner};
use super::schedule::{Schedule, Seq};
use super::{BatchError, BatchProgram};
use crate::check::{CheckError, mapped, tolerance};
use crate::engine::numerics::Numerics;
use crate::interp::{Runner, StateSnapshot};
use crate::ir::Graph;
use crate::model::Checkpoint;

/// What the batched check found.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchVerdict {
    /// Every compared value is within tolerance.
    Agree { steps: usize, rows: usize, values: usize, max_abs: f64, tolerance: f64 },
    /// The schedule or the plan is refused by name, before anything runs.
    Refused(BatchError),
    /// The first tensor out of tolerance, at its worst value.
    Disagree(BatchWitness),
    /// The reference is not finite here, so nothing can be concluded.
    Inconclusive { seq: Seq, step: usize, tensor: String, index: usize },
}

/// A value the batched engine computes differently from the sequence run alone.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchWitness {
    pub seq: Seq,
    /// The step (0-based, counting the schedule's decodes); the number of steps for the end state.
    pub step: usize,
    /// `logits`, or the name of a piece of carried state.
    pub tensor: String,
    pub index: usize,
    pub reference: f64,
    pub engine: f64,
    /// The tolerance it is out of, in absolute terms.
    pub tolerance: f64,
}

impl BatchVerdict {
    pub fn name(&self) -> &'static str {
        match self {
            BatchVerdict::Agree { .. } => "agree",
            BatchVerdict::Refused(_) => "refused",
            BatchVerdict::Disagree(_) => "disagree",
            BatchVerdict::Inconclusive { .. } => "inconclusive",
        }
    }
}

impl fmt::Display for BatchVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchVerdict::Agree { steps, rows, values, max_abs, tolerance } => write!(
                f,
                "agree over {steps} steps ({rows} rows, {values} values): max abs error {max_abs:.2e} (tolerance \
                 {tolerance:.2e})"
            ),
            BatchVerdict::Refused(e) => write!(f, "refused ({}): {e}", e.name()),
            BatchVerdict::Disagree(w) => write!(
                f,
                "disagree: {} at step {} in {}[{}]: reference {} engine {} (tolerance {:.2e})",
                w.seq, w.step, w.tensor, w.index, w.reference, w.engine, w.tolerance
            ),
            BatchVerdict::Inconclusive { seq, step, tensor, index } => {
                write!(f, "inconclusive: the reference is not finite for {seq} at step {step} in {tensor}[{index}]")
            }
        }
    }
}

/// Lowers `schedule` onto `pool` and checks the plan; a schedule the pool refuses is the verdict.
pub fn check(
    graph: &Graph,
    pool: &BatchProgram,
    checkpoint: &Checkpoint,
    schedule: &Schedule,
) -> Result<BatchVerdict, CheckError> {
    match lower_schedule(schedule, pool) {
        Ok(lowered) => check_lowered(graph, pool, checkpoint, &lowered),
        Err(e) => Ok(BatchVerdict::Refused(e)),
    }
}

/// Each sequence's reference runner and the history it has been fed.
struct Reference<'g, 'c> {
    graph: &'g Graph,
    checkpoint: &'c Checkpoint,
    runners: HashMap<Seq, (Vec<u32>, Runner<'c>)>,
}

impl<'c> Reference<'_, 'c> {
    /// `seq`'s runner after feeding `history` from the zero state (replayed when the runner holds
    /// another history: after a fork or a rollback).
    fn at(&mut self, seq: Seq, history: &[u32]) -> Result<&mut (Vec<u32>, Runner<'c>), CheckError> {
        let fresh = self.runners.get(&seq).is_none_or(|(h, _)| h != history);
        if fresh {
            let mut runner = Runner::new(self.graph, self.checkpoint)?;
            for &t in history {
                runner.step(t)?;
            }
            self.runners.insert(seq, (history.to_vec(), runner));
        }
        self.runners.get_mut(&seq).ok_or_else(|| CheckError::UnmatchedState(seq.to_string()))
    }

    fn logits(&mut self, seq: Seq, before: &[u32], token: u32) -> Result<Vec<f64>, CheckError> {
        let (h, runner) = self.at(seq, before)?;
        let logits = runner.step(token)?;
        h.push(token);
        Ok(logits)
    }

    fn state(&mut self, seq: Seq, history: &[u32]) -> Result<StateSnapshot, CheckError> {
        Ok(self.at(seq, history)?.1.state())
    }
}

/// The tolerance of the pool's numerics. The batched check compares the engine as it runs with
/// each sequence run alone on the reference, so it judges f32 numerics only, within
/// [`crate::check::F32`]; at a reduced storage type the single-sequence check's split (structure
/// exactly, numerics against the engine's shadow) has no batched counterpart yet, and a check
/// there is refused rather than given a tolerance that could excuse a wrong slot.
fn batch_tolerance(pool: &BatchProgram) -> Result<f64, CheckError> {
    if pool.program.numerics == Numerics::F32 {
        Ok(tolerance(0.0))
    } else {
        Err(CheckError::NotJudged(format!("the batched check judges f32 numerics only, not {}", pool.program.numerics)))
    }
}

/// Checks a lowered schedule (its plan possibly written by hand or mutated; its trace the
/// schedule's meaning): the plan is validated, run on the engine, and compared row by row with
/// each sequence run alone on the reference.
pub fn check_lowered(
    graph: &Graph,
    pool: &BatchProgram,
    checkpoint: &Checkpoint,
    lowered: &Lowered,
) -> Result<BatchVerdict, CheckError> {
    if let Err(e) = lowered.plan.validate(pool) {
        return Ok(BatchVerdict::Refused(e));
    }
    let mut engine = match BatchRunner::new(pool, checkpoint) {
        Ok(e) => e,
        Err(BatchRunError::Plan(e)) => return Ok(BatchVerdict::Refused(e)),
        Err(BatchRunError::Engine(e)) => return Err(e.into()),
    };
    let run = match engine.run(&lowered.plan) {
        Ok(r) => r,
        Err(BatchRunError::Plan(e)) => return Ok(BatchVerdict::Refused(e)),
        Err(BatchRunError::Engine(e)) => return Err(e.into()),
    };
    let tol = batch_tolerance(pool)?;
    let mut reference = Reference { graph, checkpoint, runners: HashMap::new() };
    let (mut values, mut rows, mut max_abs) = (0, 0, 0f64);
    for (step, meant) in lowered.trace.steps.iter().enumerate() {
        for (r, row) in meant.iter().enumerate() {
            let want = reference.logits(row.seq, &row.before, row.token)?;
            let got: Vec<f64> = run
                .logits
                .get(step)
                .and_then(|s| s.get(r))
                .map_or(vec![], |l| l.iter().copied().map(f64::from).collect());
            if let Some(v) = compare(row.seq, step, "logits", &want, &got, tol, &mut max_abs) {
                return Ok(v);
            }
            values += want.len();
            rows += 1;
        }
    }
    let steps = lowered.trace.steps.len();
    for (seq, slot, history) in &lowered.trace.live {
        let snapshot = reference.state(*seq, history)?;
        let state = engine.slot_state(*slot).ok_or_else(|| CheckError::UnmatchedState(format!("slot {slot}")))?;
        for s in state.states {
            let (want, got) = mapped(graph, &snapshot, &s.name, &s.value)
                .ok_or_else(|| CheckError::UnmatchedState(s.name.clone()))?;
            if let Some(v) = compare(*seq, steps, &s.name, &want, &got, tol, &mut max_abs) {
                return Ok(v);
            }
            values += want.len();
        }
    }
    Ok(BatchVerdict::Agree { steps, rows, values, max_abs, tolerance: tol })
}

/// Compares one tensor: `None` when every value is within `tol` of the tensor's scale
/// (`max(1, max |reference|)`), else the verdict at its worst value.
fn compare(
    seq: Seq,
    step: usize,
    tensor: &str,
    want: &[f64],
    got: &[f64],
    tol: f64,
    max_abs: &mut f64,
) -> Option<BatchVerdict> {
    if let Some(index) = want.iter().position(|x| !x.is_finite()) {
        return Some(BatchVerdict::Inconclusive { seq, step, tensor: tensor.into(), index });
    }
    let scale = want.iter().fold(1f64, |m, x| m.max(x.abs()));
    let witness = |index: usize| {
        Some(BatchVerdict::Disagree(BatchWitness {
            seq,
            step,
            tensor: tensor.into(),
            index,
            reference: want.get(index).copied().unwrap_or(f64::NAN),
            engine: got.get(index).copied().unwrap_or(f64::NAN),
            tolerance: tol * scale,
        }))
    };
    if want.len() != got.len() {
        return witness(want.len().min(got.len()));
    }
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&r, &e)) in want.iter().zip(got).enumerate() {
        let d = (e - r).abs();
        if d.is_nan() || d > tol * scale {
            let d = if d.is_nan() { f64::INFINITY } else { d };
            if worst.is_none_or(|(_, w)| d > w) {
                worst = Some((i, d));
            }
        } else {
            *max_abs = max_abs.max(d);
        }
    }
    worst.and_then(|(i, _)| witness(i))
}
